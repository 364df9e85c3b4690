"""An OpenAI-compatible server whose model's answer the test writes: /v1/models and a
streamed /v1/completions, as llama-server and vLLM send them. It keeps every prompt it
was sent, and stops its answer at the request's stop strings as those servers do
(anywhere in the text), so that what the language server asks of a real server, and
what it makes of the answer, can be checked on a text chosen to the character."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from llama_server_process import free_port


class ScriptedServer:
    def __init__(self):
        self.answer = ""  # what the model writes after any prompt
        self.ends = False  # the answer ends with the model's end-of-generation token (finish_reason "stop")
        self.pace_s = 0.0  # between two events, as a model's steps space them
        self.extra: dict = {}  # more of the usage event (llama-server's timings)
        self.metrics: str | None = None  # /metrics' text; None: not found, as a server without them answers
        self.asked: list[str] = []  # the paths of its GET requests, in order
        self.prompts: list[str] = []
        self.streaming = 0  # answers being streamed now
        self.most_streaming = 0  # the most streamed at once
        self.lock = threading.Lock()
        self.stops: list[list[str]] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                scripted.asked.append(self.path)
                if self.path == "/metrics":
                    scripted.send_metrics(self)
                    return
                scripted.send(self, {"object": "list", "data": [{"id": "scripted", "max_model_len": 4096}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                scripted.prompts.append(body["prompt"])
                scripted.stops.append(body.get("stop") or [])
                with scripted.lock:
                    scripted.streaming += 1
                    scripted.most_streaming = max(scripted.most_streaming, scripted.streaming)
                try:
                    scripted.stream(self, body.get("stop") or [])
                finally:
                    with scripted.lock:
                        scripted.streaming -= 1

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def send(self, handler: BaseHTTPRequestHandler, answer: dict) -> None:
        data = json.dumps(answer).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def send_metrics(self, handler: BaseHTTPRequestHandler) -> None:
        data = (self.metrics or "not found").encode()
        handler.send_response(200 if self.metrics is not None else 404)
        handler.send_header("Content-Type", "text/plain; version=0.0.4")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def stream(self, handler: BaseHTTPRequestHandler, stop: list[str]) -> None:
        """The answer in pieces of a few characters, cut at the first stop string."""
        text, finish = self.answer, "stop" if self.ends else "length"
        found = [text.find(string) for string in stop if string in text]
        if found:
            text, finish = text[:min(found)], "stop"
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        events = [{"choices": [{"index": 0, "text": text[i:i + 3], "finish_reason": None}]}
                  for i in range(0, len(text), 3)]
        events += [{"choices": [{"index": 0, "text": "", "finish_reason": finish}]},
                   {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": len(text) // 3}, **self.extra}]
        try:
            for event in events:
                handler.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                handler.wfile.flush()
                time.sleep(self.pace_s)
            handler.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):  # the client had what it needed, and closed
            pass

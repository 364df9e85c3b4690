"""An HTTP proxy on 127.0.0.1 in front of a real server, keeping every JSON body POSTed
through it: what the language server asked the server, to the character, so that a test
can ask the server the same itself. Answers pass through as they come (a stream stays a
stream), and the connection closes after each one."""

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from llama_server_process import free_port

CHUNK = 65536


class RecordingProxy:
    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        self.bodies: list[dict] = []  # the POSTed JSON bodies, oldest first
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                proxy.forward(self, None)

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                proxy.bodies.append(json.loads(body))
                proxy.forward(self, body)

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.http.serve_forever, name="recording-proxy", daemon=True).start()

    def forward(self, handler: BaseHTTPRequestHandler, body: bytes | None) -> None:
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=120)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(handler.command, handler.path, body=body, headers=headers)
        answer = connection.getresponse()
        handler.send_response(answer.status)
        handler.send_header("Content-Type", answer.getheader("Content-Type", "application/json"))
        handler.send_header("Connection", "close")
        handler.end_headers()
        try:
            while chunk := answer.read1(CHUNK):
                handler.wfile.write(chunk)
                handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client closed a stream it no longer wants
            pass
        finally:
            connection.close()
        handler.close_connection = True

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()

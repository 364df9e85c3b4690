"""A raw JSON-RPC connection to `completer serve --stdio`: bytes in, messages out, so
that tests can send what no well-behaved client would."""

import itertools
import json
import os
import queue
import subprocess
import threading
import time
from typing import Any

from completer.lsp import protocol
from lsp_session import SERVER


class RawServer:
    def __init__(self, env: dict[str, str] | None = None):
        self.process = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env={**os.environ, **(env or {})})
        self.messages: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self.process.stderr.read, daemon=True).start()  # keep the pipe drained

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while (line := stream.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if not line or length is None:
                return
            self.messages.put(json.loads(stream.read(length)))

    def send_bytes(self, body: bytes, length: int | None = None) -> None:
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length) + body)
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_bytes(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def request(self, id_: Any, method: str, params: Any = None, timeout: float = 30) -> dict[str, Any]:
        self.send({"id": id_, "method": method, "params": params})
        return self.response(id_, timeout)

    def response(self, id_: Any, timeout: float = 30) -> dict[str, Any]:
        """The response with this id (server-sent requests and notifications skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if "method" not in message and message.get("id") == id_:
                return message
        raise AssertionError(f"no response to {id_!r} within {timeout} s")

    def initialize(self, options: dict[str, Any], capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        """initialize with these initializationOptions (request 1), then initialized: initialize's response."""
        answer = self.request(1, "initialize", {"processId": None, "rootUri": None, "capabilities": capabilities or {},
                                                "initializationOptions": options})
        self.send({"method": "initialized", "params": {}})
        return answer

    def wait_ready(self, timeout: float = 300) -> dict[str, Any]:
        """completer/stats once the models are loaded, or failed to load."""
        deadline = time.monotonic() + timeout
        for n in itertools.count():
            stats = self.request(f"ready-{n}", protocol.STATS)["result"]
            if stats["ready"] or stats["error"]:
                return stats
            assert time.monotonic() < deadline, "the models did not load"
            time.sleep(0.2)

    def close(self) -> int:
        if self.process.poll() is None:
            self.process.kill()
        return self.process.wait(10)

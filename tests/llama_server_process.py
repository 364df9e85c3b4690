"""A real llama-server for the tests, on 127.0.0.1 at a free port, dying with pytest."""

import socket
import subprocess
import time
from pathlib import Path

from completer.bench.peers import _die_with_parent
from completer.decoders.clients import LlamaServerClient
from completer.errors import ServerError


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LlamaServer:
    """One llama-server process (start() again after stop() to restart it on the same port)."""

    def __init__(self, binary: Path, model: Path, log: Path, *args: str, slots: int = 2, context: int = 4096):
        self.command = [str(binary), "-m", str(model), "-c", str(context), "-np", str(slots), "-t", "2",
                        "-fa", "off", "--host", "127.0.0.1", "--no-webui", *args]
        self.port, self.log = free_port(), log
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> "LlamaServer":
        self.process = subprocess.Popen([*self.command, "--port", str(self.port)], stdout=self.log.open("a"),
                                        stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        client, deadline = LlamaServerClient(self.url), time.monotonic() + 120
        while True:
            try:
                client.props()
                return self
            except ServerError:
                assert self.process.poll() is None and time.monotonic() < deadline, self.log.read_text()[-3000:]
                time.sleep(0.2)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """Terminate, then kill: a server still finishing a batch on a loaded machine must not
        turn a test's own result into a TimeoutExpired at teardown."""
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

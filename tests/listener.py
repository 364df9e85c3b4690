"""A TCP listener on 127.0.0.1 that counts the connections made to it: the "other host"
a hostile workspace's settings name. Whatever connects is accepted, counted, its first
bytes kept, and closed (an HTTP client sees the server hang up: a server down)."""

import socket
import threading


class Listener:
    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)  # so that close() ends the accepting thread soon
        self.port = self.socket.getsockname()[1]
        self.accepted = 0
        self.received: list[bytes] = []  # the first bytes of each connection (an HTTP request's head)
        self.open = True
        self.thread = threading.Thread(target=self._accept, name="listener", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while self.open:
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            self.accepted += 1
            with connection:
                connection.settimeout(1.0)
                try:
                    self.received.append(connection.recv(65536))
                except OSError:  # nothing sent in time
                    self.received.append(b"")

    def close(self) -> None:
        self.open = False
        self.thread.join()
        self.socket.close()

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

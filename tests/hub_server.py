"""A local stand-in for the Hugging Face Hub's resolve endpoint, on 127.0.0.1.

It answers HEAD and GET on /{repo}/resolve/{revision}/{filename} with the headers
huggingface-hub reads (X-Repo-Commit, ETag, Content-Length) and honours Range
requests, as the Hub does for resumed downloads. Every revision serves the same file;
`requests` records the paths asked for, so a test sees which revision was.
"""

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # what a branch name resolves to
_SHA = re.compile(r"^[0-9a-f]{40}$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<filename>.+)$")


class FakeHub:
    def __init__(self, files: dict[tuple[str, str], Path], cut_first_download_at: int | None = None):
        self.files = files
        self.requests: list[tuple[str, str]] = []
        # Drop the connection after this many bytes of the first GET: a download cut half-way.
        self.cut_at = cut_first_download_at
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _lookup(self):
                hub.requests.append((self.command, self.path))
                match = _RESOLVE.match(self.path.split("?")[0])
                path = match and hub.files.get((match["repo"], match["filename"]))
                if not path:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                return path

            def _headers(self, path: Path, start: int) -> None:
                size = path.stat().st_size
                revision = _RESOLVE.match(self.path.split("?")[0])["revision"]
                self.send_response(206 if start else 200)
                # As the Hub: a commit asked for is the commit answered.
                self.send_header("X-Repo-Commit", revision if _SHA.match(revision) else COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(path.read_bytes()).hexdigest()}"')
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(size - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                self.end_headers()

            def do_HEAD(self):
                path = self._lookup()
                if path:
                    self._headers(path, 0)

            def do_GET(self):
                path = self._lookup()
                if not path:
                    return
                ranged = re.match(r"bytes=(\d+)-", self.headers.get("Range", ""))
                start = int(ranged.group(1)) if ranged else 0
                self._headers(path, start)
                with open(path, "rb") as file:
                    file.seek(start)
                    if hub.cut_at is not None:
                        self.wfile.write(file.read(hub.cut_at))
                        hub.cut_at = None
                        self.close_connection = True
                        return
                    while chunk := file.read(1 << 20):
                        self.wfile.write(chunk)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

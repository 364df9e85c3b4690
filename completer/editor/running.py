"""The requests running now, by key (a document, or EDITS + document for its next
edits): a new request for a key cancels the one before it, so the newest wins; and a
request stops once the document it was made in is closed."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from completer.requests import CancelFlag, CompletionRequest


class RunningRequests:
    """Each key's newest request's cancel flag, while that request runs. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._flags: dict[str, CancelFlag] = {}

    def start(self, key: str) -> CancelFlag:
        """The cancel flag of a new request for `key`; the older one's is set."""
        with self._lock:
            if key in self._flags:
                self._flags[key].set()
            flag = self._flags[key] = CancelFlag()
        return flag

    def cancel(self, key: str) -> None:
        """Stop the key's running request (a generation at its next round, a stream at once)."""
        with self._lock:
            if key in self._flags:
                self._flags[key].set()

    @contextmanager
    def request(self, key: str, cancel: CancelFlag | None = None) -> Iterator[CancelFlag]:
        """A request for `key` for the block's length, under `cancel` (start()'s, made here
        when not given). It is forgotten at the end unless a newer one has taken its place."""
        cancel = cancel or self.start(key)
        try:
            yield cancel
        finally:
            with self._lock:
                if self._flags.get(key) is cancel:
                    del self._flags[key]

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._flags

    def __bool__(self) -> bool:
        """Whether any request runs."""
        with self._lock:
            return bool(self._flags)


@contextmanager
def stopped_by_close(request: CompletionRequest, cancel: CancelFlag) -> Iterator[None]:
    """For the block's length, `cancel` is set when the editor closes the document
    `request` was made in; at once if it is closed already (work that starts after the
    close, such as a next edit that waited for the completions before it)."""
    unlink = request.closed.when_set(cancel.set)
    try:
        yield
    finally:
        unlink()

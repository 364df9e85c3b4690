"""What the editor side keeps of each document, in one object per document: its session
(the text and cursor of its last request, the forward cache), its recent edits for
next-edit prompts, and the cancel flags of its requests running now. Closing a document
is one removal, which stops its requests.

Newest request wins, by kind: a new request of a kind (an inline completion, a next
edit, a warm) for a document cancels the one of that kind before it."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

from completer.editor.forward_cache import ForwardCache, Shown
from completer.editor.next_edit import EditEvent
from completer.editor.postprocess import CursorContext
from completer.errors import Cancelled
from completer.requests import CancelFlag, CompletionRequest

# The kinds of request that run for a document, one of each at a time.
INLINE, EDIT, WARM = "inline", "edit", "warm"
# The user's recent edits kept, across documents (next-edit prompts take the newest that fit).
EDITS_KEPT = 16


@dataclass
class Document:
    """One document's state on the editor side."""

    path: str | None = None  # its file, once a request entered it (a session); None before
    text: str = ""  # the text of its last request
    cursor: int = 0  # the cursor of its last request: where its context chunk is taken
    forward: ForwardCache = field(default_factory=ForwardCache)
    seen: str | None = None  # its text as the edit history last saw it
    edits: list[tuple[int, EditEvent]] = field(default_factory=list)  # (order across documents, event)
    running: dict[str, CancelFlag] = field(default_factory=dict)  # by kind

    @property
    def empty(self) -> bool:
        return self.path is None and self.seen is None and not self.running


class Documents:
    """Every document's state, by the editor's key (its URI). Thread-safe: every change is
    made under one lock; a document with nothing left in it is removed."""

    def __init__(self):
        self._lock = threading.Lock()
        self._documents: dict[str, Document] = {}
        self.current: str | None = None  # the document last entered: the one the user is in
        self._order = 0  # of edit events, across documents

    # Running requests

    def start(self, key: str, kind: str) -> CancelFlag:
        """The cancel flag of a new request of `kind` for the document; the older one's is set."""
        with self._lock:
            running = self._documents.setdefault(key, Document()).running
            if kind in running:
                running[kind].set()
            flag = running[kind] = CancelFlag()
        return flag

    @contextmanager
    def running(self, key: str, kind: str) -> Iterator[CancelFlag]:
        """A new request of `kind` for the document for the block's length (start()'s flag),
        forgotten at the end unless a newer one has taken its place."""
        cancel = self.start(key, kind)
        try:
            yield cancel
        finally:
            with self._lock:
                document = self._documents.get(key)
                if document is not None and document.running.get(kind) is cancel:
                    del document.running[kind]
                    self._drop_if_empty(key)

    def owned(self, key: str, kind: str, cancel: CancelFlag | None):
        """running(), unless the request came with its flag: then its caller started it
        (Completer.request) and ends it."""
        return nullcontext(cancel) if cancel is not None else self.running(key, kind)

    def cancel(self, key: str, kind: str) -> None:
        """Stop the document's running request of `kind` (a generation at its next round, a stream at once)."""
        with self._lock:
            document = self._documents.get(key)
            if document is not None and kind in document.running:
                document.running[kind].set()

    def is_running(self, key: str, kind: str) -> bool:
        with self._lock:
            return key in self._documents and kind in self._documents[key].running

    def any_running(self, *kinds: str) -> bool:
        """Whether a request of one of `kinds` runs for any document."""
        with self._lock:
            return any(kind in document.running for document in self._documents.values() for kind in kinds)

    # Sessions

    def close(self, key: str) -> Document | None:
        """The document's state removed, its running requests cancelled; what it was."""
        with self._lock:
            document = self._documents.pop(key, None)
            if self.current == key:
                self.current = None
        for flag in document.running.values() if document is not None else ():
            flag.set()
        return document

    def enter(self, request: CompletionRequest, path: str, cancel: CancelFlag | None,
              take_text: bool) -> tuple[Document, tuple[str, Document] | None]:
        """The request's document becomes the current one, with a session; (it, (key,
        state) of the document the user left, if it has a session). `take_text`: the request's text is the document's now (a
        prefetch's is not yet), for its context chunk and the edit history (`path`: as
        prompts name the file). Cancelled: a request cancelled (a newer one, or the document
        closed: close() cancels before it forgets) brings no session back."""
        with self._lock:
            if cancel is not None and cancel.is_set():
                raise Cancelled
            document = self._documents.setdefault(request.document, Document())
            document.path = document.path or request.path
            left = self.current if self.current != request.document else None
            left_document = self._documents.get(left) if left is not None else None
            self.current = request.document
            if take_text:
                self._take_text(request, document, path)
        return document, (left, left_document) if left_document is not None and left_document.path else None

    def serve_from(self, request: CompletionRequest, path: str, forward: ForwardCache,
                   cancel: CancelFlag) -> bool:
        """A prefetch serves the request: its forward cache and text are the document's now;
        False when the document closed meanwhile (`cancel` set)."""
        with self._lock:
            if cancel.is_set():
                return False
            document = self._documents.setdefault(request.document, Document())
            document.path = document.path or request.path
            document.forward = forward
            self._take_text(request, document, path)
        return True

    def lookup(self, request: CompletionRequest, context: CursorContext) -> list[str]:
        """The forward cache's answers for the request (ForwardCache.lookup)."""
        with self._lock:
            document = self._documents.get(request.document)
            if document is None or document.path is None:
                return []
            return document.forward.lookup(request.text, request.cursor, context)

    def remember(self, document: Document, request: CompletionRequest, candidates: tuple[Shown, ...]) -> None:
        with self._lock:
            document.forward.remember(request.text, request.cursor, candidates)

    def forget_shown(self, key: str) -> None:
        """Forget the completion last shown in the document: the next request decodes."""
        with self._lock:
            if key in self._documents:
                self._documents[key].forward = ForwardCache()

    def reset(self) -> None:
        """Every session forgotten (not the edit history nor the running requests)."""
        with self._lock:
            for document in self._documents.values():
                document.path, document.text, document.cursor, document.forward = None, "", 0, ForwardCache()
            for key in [key for key, document in self._documents.items() if document.empty]:
                del self._documents[key]
            self.current = None

    def sessions(self) -> int:
        with self._lock:
            return sum(document.path is not None for document in self._documents.values())

    def session(self, key: str) -> Document | None:
        """The document's state, if it has a session."""
        with self._lock:
            document = self._documents.get(key)
            return document if document is not None and document.path is not None else None

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._documents)

    # The edit history

    def recent_edits(self) -> list[EditEvent]:
        """The user's recent edits across documents, oldest first, at most EDITS_KEPT: one
        per stretch of edits to one document (a stretch ends where another is edited)."""
        with self._lock:
            return [event for _, event in self._edits_in_order()]

    def _edits_in_order(self) -> list[tuple[int, EditEvent]]:
        return sorted(edit for document in self._documents.values() for edit in document.edits)

    def _take_text(self, request: CompletionRequest, document: Document, path: str) -> None:
        """Under the lock: the request's text and cursor are the document's now."""
        document.text, document.cursor = request.text, request.cursor
        before, document.seen = document.seen, request.text
        if before is None or before == request.text:
            return
        edits = self._edits_in_order()
        if edits and edits[-1][1].document == request.document:  # the stretch goes on
            before = document.edits.pop()[1].before
        if before != request.text:
            self._order += 1
            document.edits.append((self._order, EditEvent(request.document, path, before, request.text)))
            for order, event in self._edits_in_order()[:-EDITS_KEPT]:  # the oldest beyond those kept
                self._documents[event.document].edits.remove((order, event))

    def _drop_if_empty(self, key: str) -> None:
        if self._documents[key].empty:
            del self._documents[key]


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

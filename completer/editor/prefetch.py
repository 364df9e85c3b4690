"""Prefetch: the completion that follows a shown one, computed while it is on screen,
for the request that accepting it makes. One is kept at a time."""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from completer.decoders.decoder import DecodeCounts
from completer.editor.forward_cache import ForwardCache
from completer.requests import CancelFlag, Completion, CompletionRequest


@dataclass
class Prefetch:
    """The completion that follows a shown one once the user accepts it whole, computed
    while it is on screen (llama.vim computes the same ahead): `request` is the document
    as acceptance leaves it. Only a request with exactly its text and cursor is served
    from it; the caches already hold the shown text's tokens, so it costs the next ones."""

    request: CompletionRequest
    start: int  # where the shown completion starts in request.text (it ends at request.cursor)
    cancel: CancelFlag = field(default_factory=CancelFlag)
    done: threading.Event = field(default_factory=threading.Event)
    forward: ForwardCache = field(default_factory=ForwardCache)  # the document's forward cache, once served
    completion: Completion | None = None
    counts: DecodeCounts | None = None  # into the statistics once served: they count requests answered

    def serves(self, request: CompletionRequest) -> bool:
        ahead = self.request
        return (request.document, request.text, request.cursor) == (ahead.document, ahead.text, ahead.cursor)

    def on_the_way(self, text: str) -> bool:
        """Whether `text` is the document's text before acceptance with a start of the
        completion typed (all of it: accepted): the user may still come to the request."""
        ahead = self.request
        typed = len(text) - (len(ahead.text) - (ahead.cursor - self.start))
        return (0 <= typed <= ahead.cursor - self.start
                and text[: self.start + typed] == ahead.text[: self.start + typed]
                and text[self.start + typed :] == ahead.text[ahead.cursor :])


class PrefetchSlot:
    """The one prefetch kept, running or done. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._kept: Prefetch | None = None

    def begin(self, request: CompletionRequest, start: int) -> Prefetch | None:
        """A new prefetch for `request`, replacing (and stopping) the one kept; None when
        the one kept already serves that request."""
        ahead = Prefetch(request, start)
        with self._lock:
            if self._kept is not None and self._kept.serves(request):
                return None
            if self._kept is not None:
                self._kept.cancel.set()
            self._kept = ahead
        return ahead

    def drop(self, unless_kept: Callable[[Prefetch], bool]) -> None:
        """Stop and forget the prefetch kept if `unless_kept(prefetch)`."""
        with self._lock:
            ahead = self._kept
            if ahead is None or not unless_kept(ahead):
                return
            self._kept = None
        ahead.cancel.set()

    def take(self, request: CompletionRequest) -> Prefetch | None:
        """The prefetch for this request, taken (it serves once); any other stops."""
        with self._lock:
            ahead, self._kept = self._kept, None
        if ahead is not None and not ahead.serves(request):
            ahead.cancel.set()
            return None
        return ahead

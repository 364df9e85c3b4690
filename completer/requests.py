"""What the editor side asks and answers, for every decoder: the request, the answer,
the closed sets its source and stop reason come from, and the cancel flag a request
carries. Nothing here knows where decoding runs."""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from completer.errors import PositionError
from completer.prompt import ContextFile


@dataclass(frozen=True)
class TextEdit:
    """Replace the document's text[start:end] with `text` (offsets in characters)."""

    start: int
    end: int
    text: str


class Source(StrEnum):
    """Where a completion came from. Only MODEL, FORWARD_CACHE and PREFETCH carry text."""

    MODEL = "model"  # decoded for this request
    FORWARD_CACHE = "forward cache"  # the rest of the completion shown before, which the user is typing
    PREFETCH = "prefetch"  # computed while the completion it follows was shown, before the user accepted it
    SUPERSEDED = "superseded"  # a newer request for the document took over: show nothing
    # No prompt fits the context, or the next-edit format spells control tokens the
    # model lacks: `warning` says which options to change.
    NO_ROOM = "no room"
    REFUSED = "refused"  # the server refused this request alone (it is up): the log says why
    SERVER_DOWN = "server down"  # the server cannot be used now: `warning` says why
    EXCLUDED = "excluded"  # the document matches context.exclude: no prompt is made of it


class StopReason(StrEnum):
    """Why decoding stopped, or why it did not run."""

    NONE = ""  # nothing was decoded (a forward-cache hit)
    END = "end"  # the model ended its text
    STOP = "stop"  # a stop string (the end of the cursor's scope, a line for one-line completions)
    DONE = "done"  # post-processing found the completion complete (its scope closed)
    MAX_TOKENS = "max_tokens"  # generation.max_tokens
    TIME = "time"  # generation.time_budget_ms: the last line may be half-written
    CONTEXT = "context"  # the context filled up
    CANCELLED = "cancelled"  # a newer request, $/cancelRequest or a closed document
    PROMPT_TOO_LONG = "prompt too long"  # Source.NO_ROOM
    UNAVAILABLE = "unavailable"  # Source.REFUSED and Source.SERVER_DOWN


class CancelFlag(threading.Event):
    """A request's cancel flag (a threading.Event, as the local engine polls between its
    rounds) that also runs what was registered when it is set: a server's stream blocked
    reading, while the server evaluates a long prompt, is closed at once rather than at
    its next token."""

    def __init__(self):
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._callbacks_lock = threading.Lock()

    def set(self) -> None:
        with self._callbacks_lock:
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def when_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` when the flag is set (now, if it is); returns what unregisters it."""
        with self._callbacks_lock:
            if not self.is_set():
                self._callbacks.append(callback)
                return lambda: self._discard(callback)
        callback()
        return lambda: None

    def _discard(self, callback: Callable[[], None]) -> None:
        with self._callbacks_lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


@dataclass(frozen=True)
class CompletionRequest:
    document: str  # the editor's name for it: a URI or a path
    path: str  # its file path, for the prompt's header and the workspace check
    text: str
    cursor: int  # an offset into `text`, in characters (code points)
    language: str = ""
    # Set when the editor closes the document this request was made in (the language
    # server's didClose): the work for it stops and keeps nothing of the document. One
    # flag per opening, so that work for an earlier one, however late, never counts as a
    # reopened document's.
    closed: CancelFlag = field(default_factory=CancelFlag, compare=False, repr=False)

    def check_cursor(self) -> None:
        """PositionError when the cursor is outside the text."""
        if not 0 <= self.cursor <= len(self.text):
            raise PositionError(f"offset {self.cursor} is outside the document ({len(self.text)} characters)")


@dataclass
class Completion:
    text: str  # to insert at the cursor
    source: Source
    stop_reason: StopReason = StopReason.NONE
    prompt: list[int] | str = field(default_factory=list)  # as rendered, before token healing (text for openai)
    evaluated_tokens: int = 0  # prompt tokens the decoder's cache lacked
    # The decoder's own result, with its own statistics: the local engine's
    # engine.Generation, or a server's remote.RemoteGeneration; None without decoding.
    result: Any = None
    # What the user should hear of once (the server says when it changes): why the draft
    # model was dropped, why the server cannot be used now, or why no prompt fits; "" while
    # all is well.
    warning: str = ""
    # The other candidates (generation.candidates), distinct and none empty; the editor
    # cycles through them after `text`.
    alternatives: list[str] = field(default_factory=list)
    # The other files the prompt showed (prompt.ContextFile: the definitions it likely
    # calls, the open files' chunks), each saying why: what `--show-prompt` lists.
    context: tuple[ContextFile, ...] = ()

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt)


@dataclass
class NextEdit:
    """The edits the user will make next around the cursor, in document offsets and in
    order; none is a valid answer, and the common one."""

    edits: list[TextEdit]
    source: Source
    stop_reason: StopReason = StopReason.NONE
    rewrite: str | None = None  # the region as the model wrote it; None when it wrote no whole region
    prompt: list[int] | str = field(default_factory=list)
    result: Any = None  # the decoder's own result, as Completion.result
    warning: str = ""  # as Completion.warning


@dataclass(frozen=True)
class CompleterStats:
    """The completer's part of `completer/stats` (lsp/protocol.py says what each is)."""

    draft_failure: str = ""
    server_error: str = ""
    requests: int = 0
    forward_cache_hits: int = 0
    superseded: int = 0
    cache_hit_rate: float = 0.0
    draft_acceptance_rate: float = 0.0
    tokens_per_second: float = 0.0
    sessions: int = 0
    saved_kv_mb: float = 0.0
    drafting_documents: int = 0
    tuned_documents: int = 0
    warmed_tokens: int = 0
    index_files: int = 0
    index_tokens: int = 0
    index_mb: float = 0.0
    definitions_files: int = 0
    definitions: int = 0
    definitions_mb: float = 0.0
    definitions_build_ms: int = 0
    edit_requests: int = 0  # next-edit requests answered
    edits_suggested: int = 0  # of those, answers with at least one edit
    prefetches: int = 0
    prefetch_hits: int = 0
    saturated: bool = False
    adaptive_debounce_ms: int = 0


def cursor_offset(text: str, line: int, character: int) -> int:
    """The offset of a 0-based line and character (lines end at "\n", a "\r" before it is
    not a character of the line); PositionError when the cursor is outside the text. For
    callers that count lines: the LSP layer has its own, as the protocol counts them."""
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        raise PositionError(f"line {line} is outside the document ({len(lines)} lines)")
    current = lines[line].rstrip("\r")
    if not 0 <= character <= len(current):
        raise PositionError(f"character {character} is outside line {line} ({len(current)} characters)")
    return sum(len(text_line) + 1 for text_line in lines[:line]) + character

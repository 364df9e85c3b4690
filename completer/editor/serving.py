"""What the Completer's parts share: the decoder, the workspace, the documents, the
context chunks, the counters and the options in force; entering a document under the
decoder's turn, and turning a decoder's failures into answers."""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from completer.config import Config
from completer.decoders.protocol import Decoder, DecoderModel
from completer.editor.context import ChunkRing
from completer.editor.counters import Counters
from completer.editor.documents import Document, Documents
from completer.errors import Cancelled, PromptTooLong, Refused, Unavailable
from completer.requests import CancelFlag, Completion, CompletionRequest, NextEdit, Source, StopReason
from completer.workspace import Workspace

log = logging.getLogger("completer.editor.completer")

A = TypeVar("A")  # an answer: a Completion or a NextEdit


def no_room_warning(error: PromptTooLong, context: str, max_tokens: int) -> str:
    """Why no prompt fits, and what to change: `context` names where the tokens are
    counted (models.context_tokens, or a server's slot)."""
    return (f"no completion: {error}: {context} less generation.max_tokens {max_tokens}. Lower "
            "generation.max_tokens or give the model a larger context")


def empty_completion(source: Source, stop_reason: StopReason, warning: str = "") -> Completion:
    return Completion("", source, stop_reason, warning=warning)


def no_edit(source: Source, stop_reason: StopReason, warning: str = "") -> NextEdit:
    return NextEdit([], source, stop_reason, warning=warning)


def superseded() -> Completion:
    """The empty answer to a request a newer one (or $/cancelRequest) took over."""
    return empty_completion(Source.SUPERSEDED, StopReason.CANCELLED)


@dataclass
class Serving:
    """The state the Completer's parts (inline completions, next edits) work on."""

    decoder: Decoder
    workspace: Workspace
    config: Config
    documents: Documents
    counters: Counters
    ring: ChunkRing

    def workspace_path(self, path: str) -> str:
        """A file's path as prompts name it: relative to the workspace, inside it."""
        return self.workspace.relative(path) if self.workspace.contains(path) else path

    def enter(self, request: CompletionRequest, cancel: CancelFlag | None, ahead: bool = False,
              edits: bool = False) -> Document:
        """Under the decoder's turn: the request's document becomes the current one, and the
        workspace document the user left a context chunk (measured in the decoder's
        tokens, under the request's cancel flag) that the decoder may draft from. `ahead`:
        a prefetch, whose text is not yet the document's: the session's text and the edit
        history stay as they are. `edits`: a next-edit request, on the document's caches for
        next edits."""
        document, left = self.documents.enter(request, self.workspace_path(request.path), cancel,
                                              take_text=not ahead)
        left_for_drafting = None
        if left is not None and left[1].text and self.workspace.contains(left[1].path):
            key, state = left
            self.ring.add(state.path, state.text, state.cursor, lambda text: self.decoder.count(text, cancel))
            left_for_drafting = (key, state.text)
        in_workspace = request.path if self.workspace.contains(request.path) else None
        self.decoder.enter(request.document, in_workspace, left_for_drafting, cancel, edits)
        return document

    def in_turn(self, cancel: CancelFlag, work: Callable[[DecoderModel], A],
                empty: Callable[[Source, StopReason, str], A]) -> A:
        """`work(model)` under the decoder's turn; `empty(source, stop reason, warning)` says
        why there is no answer when the decoder cannot serve, the request was superseded,
        no prompt fits or the server refused it."""
        model = self.decoder.connect()
        if model is None:
            return empty(Source.SERVER_DOWN, StopReason.UNAVAILABLE, "")
        with self.decoder.turn():
            if cancel.is_set():
                return empty(Source.SUPERSEDED, StopReason.CANCELLED, "")
            try:
                return work(model)
            except Cancelled:
                return empty(Source.SUPERSEDED, StopReason.CANCELLED, "")
            except PromptTooLong as error:
                return empty(Source.NO_ROOM, StopReason.PROMPT_TOO_LONG, no_room_warning(
                    error, model.context_name, self.config.generation.max_tokens))
            except Refused as error:
                log.warning("%s (this request only: the server is up)", error)
                return empty(Source.REFUSED, StopReason.UNAVAILABLE, "")
            except Unavailable:
                return empty(Source.SERVER_DOWN, StopReason.UNAVAILABLE, "")

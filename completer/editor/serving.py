"""What the Completer's parts share: the decoder, the workspace, the documents, the
context chunks, the counters and the options in force; entering a document (from the
request's prompt, under the decoder's turn), and turning a decoder's failures into answers."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from completer.config import Config
from completer.decoders.decoder import Decoder, DecoderModel
from completer.editor.context import ChunkRing
from completer.editor.counters import Counters
from completer.editor.documents import Document, Documents
from completer.editor.load import LoadGauge
from completer.editor.repository_context import RepositoryContext
from completer.errors import Cancelled, PromptTooLong, Refused, Unavailable
from completer.requests import CancelFlag, Completion, CompletionRequest, NextEdit, Source, StopReason
from completer.workspace import Workspace

log = logging.getLogger("completer.editor.completer")

A = TypeVar("A")  # an answer: a Completion or a NextEdit


class NoRoom(Exception):
    """No prompt fits the decoder's model; the message is what the user is told. Raised by
    the editor side's prompt (DecodeRequest.prompt), which the decoder calls, and answered
    by the editor side: it is never a decoder's."""


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
    repository: RepositoryContext
    load: LoadGauge = field(default_factory=LoadGauge)  # a shared server's, from the answers' pace

    def workspace_path(self, path: str) -> str:
        """A file's path as prompts name it: relative to the workspace, inside it."""
        return self.workspace.relative(path) if self.workspace.contains(path) else path

    def enter(self, request: CompletionRequest, cancel: CancelFlag | None, model: DecoderModel,
              ahead: bool = False) -> tuple[Document, str | None, tuple[str, str] | None]:
        """Under the decoder's turn (its call to the request's prompt): the request's document
        becomes the current one, and the workspace document the user left a context chunk
        (measured in the model's tokens) that the decoder may draft from, its definitions
        read again. `ahead`: a prefetch, whose text is not yet the document's: the session's
        text and the edit history stay as they are. The document's state, its path when
        inside the workspace, and (document, text) of the one left for the decoder to draft
        from. A document context.exclude names is never context."""
        document, left = self.documents.enter(request, self.workspace_path(request.path), cancel,
                                              take_text=not ahead)
        left_for_drafting = None
        if (left is not None and left[1].text and self.workspace.contains(left[1].path)
                and not self.repository.excluded(left[1].path)):
            key, state = left
            self.ring.add(state.path, state.text, state.cursor, model.count)
            self.repository.file_changed(state.path, state.text)
            left_for_drafting = (key, state.text)
        return document, request.path if self.workspace.contains(request.path) else None, left_for_drafting

    def answer(self, decode: Callable[[], A], empty: Callable[[Source, StopReason, str], A]) -> A:
        """`decode()`, the request's one call to the decoder; `empty(source, stop reason,
        warning)` says why there is no answer when the decoder cannot serve, the request
        was superseded, no prompt fits or the server refused it."""
        try:
            return decode()
        except Cancelled:
            return empty(Source.SUPERSEDED, StopReason.CANCELLED, "")
        except NoRoom as error:
            return empty(Source.NO_ROOM, StopReason.PROMPT_TOO_LONG, str(error))
        except Refused as error:
            log.warning("%s (this request only: the server is up)", error)
            return empty(Source.REFUSED, StopReason.UNAVAILABLE, "")
        except Unavailable:
            return empty(Source.SERVER_DOWN, StopReason.UNAVAILABLE, "")

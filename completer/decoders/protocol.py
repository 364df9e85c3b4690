"""The one seam under the editor side: a Decoder turns a request's prompt into text.

    Completer (editor/completer.py): documents, prompts, the forward cache,
                            post-processing, newest-request-wins, statistics; the same
                            for every backend
      -> Decoder: connect, encode a prompt's segments, decode (prompt + budget + cancel
                  flag -> text + its own counts), warm, and the documents' lifecycle
           LocalDecoder  (local.py): the engine, per-document KV caches, the index
           ServerDecoder (server.py): llama-server or an OpenAI-compatible server

A request's failures are completer.errors' family: decoders raise Unavailable (cannot
serve now: the server is down), Refused (this request alone) and Cancelled (the
request's cancel flag closed a call under way); the Completer turns each into its answer.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from completer.config import Config
from completer.engine.speculative import Sampling
from completer.prompt import FimTemplate, Segment
from completer.requests import CancelFlag
from completer.workspace import Workspace


@dataclass(frozen=True)
class DecoderModel:
    """What prompts are made for: the FIM template and the tokens one request has."""

    template: FimTemplate | None
    context_tokens: int  # prompt and answer together
    context_name: str  # where those tokens are set, for a message saying no prompt fits


def never_done(text: str) -> bool:
    """Decode.done's default: decoding ends at max_tokens, a stop string or the end token."""
    return False


@dataclass(frozen=True, kw_only=True)
class Decode:
    """One request's decoding, as the Completer asks for it. Keyword-only: a dozen
    fields of which several are numbers and flags read wrongly by position."""

    document: str
    language: str
    prompt: list[int] | str  # as the decoder's encode made it
    prompt_length: int  # in the decoder's tokens, as encode counted them
    max_tokens: int
    draft_mode: str  # the local engine's drafting; a server drafts as it is configured
    time_budget_ms: float = 0.0  # 0: no budget
    sampling: Sampling = Sampling()
    heal: bool = False  # token healing at the cursor, where the decoder has the vocabulary for it
    stop: list[str] = field(default_factory=list)
    done: Callable[[str], bool] = never_done  # the text is complete: decoding may end early
    cancel: CancelFlag = field(default_factory=CancelFlag)
    # The text the answer rewrites (a next edit's region), for a decoder that drafts from
    # it (the local engine's copy drafting); "" for an answer that writes new text.
    copy_from: str = ""
    candidates: int = 1  # texts wanted: the answer and candidates - 1 others (the local engine's)


@dataclass(frozen=True)
class DecodeCounts:
    """A decoding's counts, for the completer's statistics."""

    prompt_tokens: int
    evaluated_tokens: int  # of those, the ones the decoder's cache lacked
    generated_tokens: int
    generation_ms: float
    drafted: int
    accepted: int


@dataclass(frozen=True)
class Decoded:
    text: str
    stop_reason: str  # a requests.StopReason
    counts: DecodeCounts | None  # None when the decoder could not say (a stream closed early)
    result: Any  # the decoder's own result (requests.Completion.result)
    # The other candidates' (text, stop reason), before post-processing, as `text` is.
    alternatives: tuple[tuple[str, str], ...] = ()


def with_length(tokens: list[int]) -> tuple[list[int], int]:
    """Token ids as a Decoder's encode gives them: the prompt, and its length."""
    return tokens, len(tokens)


class Decoder(Protocol):
    """Where decoding runs. Thread-safe: the Completer calls it from worker threads."""

    @property
    def warning(self) -> str:
        """What the user should hear of now (a dropped draft, a server down); "" when all is well."""
        ...

    def connect(self) -> DecoderModel | None:
        """The model prompts are made for; None while the decoder cannot serve (`warning` says why)."""
        ...

    def configure(self, config: Config) -> None:
        """New options, from the next request on (the models stay)."""
        ...

    def turn(self) -> AbstractContextManager:
        """Held by a request from entering its document to the end of its decoding: the
        local engine serves one request at a time, a server several."""
        ...

    def enter(self, document: str, path_in_workspace: str | None, left: tuple[str, str] | None,
              cancel: CancelFlag | None, edits: bool = False) -> None:
        """A request for `document` starts (under its turn). `path_in_workspace`: its path,
        when inside the workspace; `left`: (document, text) of a workspace document the user
        just left; `edits`: a next-edit request, whose prompt shares next to nothing with
        the document's completions'."""
        ...

    def encode(self, segments: list[Segment], cancel: CancelFlag | None = None) -> tuple[list[int] | str, int]:
        """A prompt's segments as this decoder takes them, and the length in its tokens."""
        ...

    def count(self, text: str, cancel: CancelFlag | None = None) -> int:
        """`text`'s length in this decoder's tokens."""
        ...

    def decode(self, decode: Decode) -> Decoded:
        ...

    def prompt_text(self, prompt: list[int] | str) -> str:
        """A prompt as the model sees it, control tokens spelt out."""
        ...

    def warm(self, document: str, prompt_for: Callable[[], list[int] | str]) -> int:
        """Evaluate the prompt `prompt_for()` makes (entering the document, under the
        decoder's turn) ahead of a request, generating nothing; the tokens evaluated."""
        ...

    def close(self, document: str, path: str | None) -> None:
        """The editor closed the document (`path`: its file, when it had a session). Never
        waits: the language server calls it on its event loop."""
        ...

    def file_saved(self, path: str, text: str) -> None:
        """A workspace file was saved with this text."""
        ...

    def reset(self) -> None:
        """Forget every document's caches."""
        ...

    def index_workspace(self, workspace: Workspace) -> Any:
        """Start indexing the workspace for drafting; the thread, or None when there is none to run."""
        ...

    def stop_indexing(self) -> None:
        ...

    def statistics(self) -> dict:
        """The decoder's part of CompleterStats, by field."""
        ...


"""The one seam under the editor side: a Decoder decodes a request, making its prompt
with the decoder's own vocabulary, and hears of the documents' lifecycle as events
(Saved, Closed).

    Completer (editor/): documents, what a prompt holds (the text around the cursor,
                         other files' chunks, the recent edits, the format),
                         post-processing, newest-request-wins, statistics; the same for
                         every decoder
      -> Decoder.decode(DecodeRequest) -> Decoded: under the decoder's turn the
                         request's prompt is made for the decoder's model (DecoderModel:
                         its template, context and tokenizer), tried once more at half
                         the length when a server finds it too long, the document's
                         caches entered, and decoded
         Decoder.warm(DecodeRequest): the same prompt evaluated, nothing generated
         LocalDecoder  (local.py): the engine, per-document KV caches, the index
         ServerDecoder (server.py): llama-server or an OpenAI-compatible server

A request's failures are completer.errors' family: decoders raise Unavailable (cannot
serve now: the server is down), Refused (this request alone) and Cancelled (the
request's cancel flag closed a call under way); the Completer turns each into its answer.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from completer.config import Config
from completer.engine.speculative import Sampling
from completer.prompt import FimTemplate, Segment
from completer.requests import CancelFlag
from completer.workspace import Workspace


@dataclass(frozen=True)
class DecoderModel:
    """What prompts are made for: the FIM template, the tokens one request has, and the
    model's tokenizer (for one request: its calls stop at the request's cancel flag)."""

    template: FimTemplate | None
    context_tokens: int  # prompt and answer together
    context_name: str  # where those tokens are set, for a message saying no prompt fits
    encode: Callable[[list[Segment]], tuple[list[int] | str, int]]  # a prompt's segments, and its length in tokens
    count: Callable[[str], int]  # a text's length in tokens
    text_of: Callable[[list[int] | str], str]  # a prompt as the model sees it, control tokens spelt out
    shared: bool = False  # a server others may use too: the client backs off under its load (editor/load.py)


def never_done(text: str) -> bool:
    """Prompt.done's default: decoding ends at max_tokens, a stop string or the end token."""
    return False


@dataclass(frozen=True, kw_only=True)
class Prompt:
    """A request's prompt as the editor side made it for the decoder's model, and how its
    answer ends."""

    tokens: list[int] | str  # as the model's encode made them
    length: int  # in the model's tokens
    max_tokens: int
    stop: tuple[str, ...] = ()
    done: Callable[[str], bool] = never_done  # the text is complete: decoding may end early
    # The text the answer rewrites (a next edit's region), for a decoder that drafts from
    # it (the local engine's copy drafting); "" for an answer that writes new text.
    copy_from: str = ""
    in_workspace: str | None = None  # the document's path, when inside the workspace
    left: tuple[str, str] | None = None  # (document, text) of a workspace document the user just left
    made: Any = None  # the editor side's own, back with the answer (the cursor's suffix, the fitted region)


@dataclass(frozen=True, kw_only=True)
class DecodeRequest:
    """One request, as the Completer gives it to the decoder."""

    document: str
    language: str
    # Under the decoder's turn: the prompt made for its model in at most `room` tokens
    # (PromptTooLong, or the editor side's own error, when none fits).
    prompt: Callable[[DecoderModel, int], Prompt]
    answer_tokens: int  # the room the answer keeps in the context (a next edit's prompt holds its own)
    edits: bool = False  # a next edit: its prompt shares next to nothing with the document's completions'
    # A prompt a server finds longer than its context (our count was an estimate, or its
    # slots shrank) is made once more at half the length (an inline completion's).
    retry_shorter: bool = True
    draft_mode: str = "auto"  # the local engine's drafting; a server drafts as it is configured
    time_budget_ms: float = 0.0  # 0: no budget
    sampling: Sampling = Sampling()
    heal: bool = False  # token healing at the cursor, where the decoder has the vocabulary for it
    cancel: CancelFlag = field(default_factory=CancelFlag)
    candidates: int = 1  # texts wanted: the answer and candidates - 1 others (the local engine's)


@dataclass(frozen=True, kw_only=True)
class Decode:
    """A request with its prompt made, as a decoder decodes it (ready()). Keyword-only: a
    dozen fields of which several are numbers and flags read wrongly by position."""

    document: str
    language: str
    prompt: list[int] | str  # as the model's encode made it
    prompt_length: int  # in the model's tokens
    max_tokens: int
    draft_mode: str  # the local engine's drafting; a server drafts as it is configured
    time_budget_ms: float = 0.0  # 0: no budget
    sampling: Sampling = Sampling()
    heal: bool = False  # token healing at the cursor, where the decoder has the vocabulary for it
    stop: list[str] = field(default_factory=list)
    done: Callable[[str], bool] = never_done  # the text is complete: decoding may end early
    cancel: CancelFlag = field(default_factory=CancelFlag)
    copy_from: str = ""  # Prompt.copy_from
    candidates: int = 1  # texts wanted: the answer and candidates - 1 others (the local engine's)


def ready(request: DecodeRequest, prompt: Prompt) -> Decode:
    """The request with its prompt made, as a decoder decodes it."""
    return Decode(document=request.document, language=request.language, prompt=prompt.tokens,
                  prompt_length=prompt.length, max_tokens=prompt.max_tokens, draft_mode=request.draft_mode,
                  time_budget_ms=request.time_budget_ms, sampling=request.sampling, heal=request.heal,
                  stop=list(prompt.stop), done=prompt.done, cancel=request.cancel, copy_from=prompt.copy_from,
                  candidates=request.candidates)


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
    prompt: Prompt | None = None  # the request's prompt, as it was decoded (DecodeRequest.prompt's last)


@dataclass(frozen=True)
class Saved:
    """A workspace file was saved with this text (the decoder may draft from it)."""

    path: str
    text: str


@dataclass(frozen=True)
class Closed:
    """The editor closed the document; `path` is its file, when it had a session."""

    document: str
    path: str | None


# What the editor did to a document that its decoder's caches follow. An opened or changed
# document needs no event: the next request carries its text, and the caches follow that.
DocumentEvent = Saved | Closed


def with_length(tokens: list[int]) -> tuple[list[int], int]:
    """Token ids as a model's encode gives them: the prompt, and its length."""
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

    def decode(self, request: DecodeRequest) -> Decoded:
        """The request decoded: under the decoder's turn, its prompt made for the model
        (request.prompt), the document's caches entered, the answer generated."""
        ...

    def warm(self, request: DecodeRequest) -> int:
        """The request's prompt evaluated ahead of a request, generating nothing; the tokens evaluated."""
        ...

    def document_event(self, event: DocumentEvent) -> None:
        """The caches follow the event before the next request uses them. Never waits for a
        decoding under way: the language server sends Closed on its event loop (Saved comes
        from a worker, since reading a saved file's text may take a while)."""
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

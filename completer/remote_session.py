"""Completions from a server that decodes: llama-server's own API, or any
OpenAI-compatible /v1/completions (vLLM, llama-server). What the editor side keeps is
what session.Completer keeps: documents, the prompt (the family's FIM template, the
context chunks), post-processing, the forward cache, newest-request-wins and the
statistics. What the server does: decoding, its own speculation and the KV cache.

    request (document text, cursor)
      -> forward cache: the user typed the start of what is shown? its rest, no call
      -> newest request wins: an older one for the document is cancelled, its stream
         closed (the server stops generating)
      -> the server: connected (its model, slots and FIM family), or down: an empty
         answer, and another try after a backoff
      -> prompt, in the slot the server chooses (the one sharing most with it), or with
         models.server_slots pin the document's own (least recently used give theirs up)
      -> generate on the server, streamed; post-process, remember for the forward cache
"""

import math
import re
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from completer.config import Config, ModelOptions
from completer.context import ChunkRing, Workspace
from completer.postprocess import CursorContext, cut_to_scope, postprocess, stops_for
from completer.prompt import TEMPLATES, FimTemplate, Segment, cursor_sections, template_for, tokenize_segments
from completer.remote import (CancelFlag, LlamaServerClient, OpenAIClient, RemoteGeneration, ServerError, ServerProps,
                              SlotMap)
from completer.session import (CompleterStats, Completion, CompletionRequest, CompletionSession, Counters,
                               PositionError, counted, fit_prompt)
from completer.speculative import Sampling

# A restarted server is back within seconds, so the first retry comes soon; one that
# stays down is asked at most every half minute, not on every keystroke.
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 30.0
# Plain text segments tokenized by the server, kept by their text: context chunks and
# the path header come back on every request, the prefix changes with each keystroke.
TOKENIZED_TEXTS = 512
# Characters a token, for a server that cannot tokenize (OpenAI's API): smol's vocabulary
# made 3.9 of Python's standard library modules at the median and 3.3 at the tenth
# percentile, so 3 overestimates most prompts' lengths and they fit the context.
CHARS_PER_TOKEN = 3.0


@dataclass(frozen=True)
class ServerModel:
    """What the server runs, as the completer needs it."""

    name: str  # the model file's name (or the served model's id)
    slots: int  # 0: an API without slots
    context_tokens: int  # per slot
    template: FimTemplate | None
    speculative: dict[str, float | int | str] = field(default_factory=dict)

    def summary(self) -> str:
        speculative = ", ".join(f"{key} {value}" for key, value in self.speculative.items()) or "not reported"
        family = self.template.family if self.template else "none (a prefix-only prompt)"
        slots = (f"{self.slots} slot{'s' * (self.slots != 1)} of {self.context_tokens} tokens" if self.slots else
                 f"a context of {self.context_tokens} tokens (no slots: the server's own prefix cache)")
        return f"model {self.name}, {slots}, FIM family {family}, speculative: {speculative}"


class Backend(Protocol):
    """A server, as RemoteCompleter drives it. Every call raises ServerError with the
    reason when the server cannot be used."""

    url: str

    def connect(self) -> ServerModel: ...

    def encode(self, segments: list[Segment]) -> tuple[list[int] | str, int]: ...

    def count(self, text: str) -> int: ...

    def text_of(self, prompt: list[int] | str) -> str: ...

    def generate(self, prompt: list[int] | str, slot: int, max_tokens: int, stop: list[str], sampling: Sampling,
                 time_budget_ms: float, cancel: CancelFlag, done=None) -> RemoteGeneration: ...


def template_named(family: str) -> FimTemplate | None:
    """models.prompt_family's template: None for `none`."""
    return next((template for template in TEMPLATES if template.family == family), None)


class ServerVocabulary:
    """The server's vocabulary, as prompts need it (prompt.Vocabulary): /tokenize and
    /detokenize, with the answers kept, since the same texts come back every request."""

    def __init__(self, client: LlamaServerClient):
        self.client = client
        self._tokens: dict[tuple[str, bool], list[int]] = {}  # oldest first (dicts keep order)
        self._texts: dict[int, str] = {}
        self._lock = threading.Lock()  # requests for several documents tokenize at once

    def tokenize(self, text: str, parse_special: bool = False) -> list[int]:
        key = (text, parse_special)
        with self._lock:
            if key in self._tokens:
                return self._tokens[key]
        tokens = self.client.tokenize(text, parse_special)
        with self._lock:
            if len(self._tokens) >= TOKENIZED_TEXTS:
                del self._tokens[next(iter(self._tokens))]
            self._tokens[key] = tokens
        return tokens

    def token_text(self, token: int) -> str:
        if token not in self._texts:
            self._texts[token] = self.client.detokenize([token])
        return self._texts[token]

    def token_bytes(self, token: int) -> bytes:
        return self.token_text(token).encode()


class LlamaServerBackend:
    """llama-server's own API: prompts as token ids (so that a file's text can never
    become a control token), its slots, its timings and drafts."""

    def __init__(self, client: LlamaServerClient, family: str = "auto"):
        self.client, self.url, self.family = client, client.url, family
        self.vocabulary = ServerVocabulary(client)

    def connect(self) -> ServerModel:
        props: ServerProps = self.client.props()
        self.vocabulary = ServerVocabulary(self.client)  # a restarted server may run another model
        detected = template_for(self.vocabulary)
        name = Path(props.model).name or props.model
        template = detected if self.family == "auto" else template_named(self.family)
        if self.family not in ("auto", "none") and template != detected:
            has = f"{detected.family}'s FIM tokens" if detected else "no FIM tokens"
            raise ServerError(f"models.prompt_family is {self.family}, but the server's model {name} has {has}: "
                              "set models.prompt_family to auto")
        speculative = dict(props.speculative)
        try:  # the slots say whether the server drafts (a draft model or n-gram lookup); --no-slots hides them
            speculative["drafting"] = "yes" if any(slot.get("speculative") for slot in self.client.slots()) else "no"
        except ServerError:
            pass
        return ServerModel(name, props.slots, props.context_tokens, template, speculative)

    def encode(self, segments: list[Segment]) -> tuple[list[int], int]:
        return counted(tokenize_segments(self.vocabulary, segments))

    def count(self, text: str) -> int:
        return len(self.vocabulary.tokenize(text))

    def text_of(self, prompt: list[int]) -> str:
        return self.client.detokenize(prompt)

    def generate(self, prompt: list[int], slot: int, max_tokens: int, stop: list[str], sampling: Sampling,
                 time_budget_ms: float, cancel: CancelFlag, done=None) -> RemoteGeneration:
        return self.client.complete(prompt, max_tokens, slot, stop, sampling.temperature, sampling.top_k,
                                    sampling.top_p, time_budget_ms, cancel, done)


def template_in_name(name: str) -> FimTemplate | None:
    """The family a served model's name says (`Qwen/Qwen2.5-Coder-7B` is qwen2.5-coder's),
    letters and digits compared; None when it names none."""
    squashed = _letters_and_digits(name)
    return next((template for template in TEMPLATES if _letters_and_digits(template.family) in squashed), None)


def _letters_and_digits(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


class OpenAIBackend:
    """An OpenAI-compatible /v1/completions: the prompt as text with the family's control
    tokens spelt out, which the server's tokenizer parses (a file's own spelling of a
    control token is taken out first, so that it cannot inject one). Lengths are
    estimated at CHARS_PER_TOKEN, since the API has no tokenizer."""

    def __init__(self, client: OpenAIClient, family: str = "auto", context_tokens: int = 4096):
        self.client, self.url, self.family = client, client.url, family
        self.context_tokens = context_tokens
        self.model = ""
        self.controls: tuple[str, ...] = ()

    def connect(self) -> ServerModel:
        entry = self.client.models()[0]
        self.model = entry["id"]
        template = template_in_name(self.model) if self.family == "auto" else template_named(self.family)
        self.controls = tuple(token for token in (*template.required_tokens(), template.repo_name,
                                                  template.file_separator) if token) if template else ()
        context = int(entry.get("max_model_len") or 0) or self.context_tokens
        return ServerModel(self.model, 0, context, template)

    def encode(self, segments: list[Segment]) -> tuple[str, int]:
        text = "".join(segment.text if segment.special else self._plain(segment.text) for segment in segments)
        return text, self.count(text)

    def _plain(self, text: str) -> str:
        for control in self.controls:
            text = text.replace(control, "")
        return text

    def count(self, text: str) -> int:
        return math.ceil(len(text) / CHARS_PER_TOKEN)

    def text_of(self, prompt: str) -> str:
        return prompt

    def generate(self, prompt: str, slot: int, max_tokens: int, stop: list[str], sampling: Sampling,
                 time_budget_ms: float, cancel: CancelFlag, done=None) -> RemoteGeneration:
        return self.client.complete(self.model, prompt, max_tokens, stop, sampling.temperature, sampling.top_k,
                                    sampling.top_p, time_budget_ms, cancel, done)


def backend_for(options: ModelOptions, environ: dict[str, str]) -> Backend:
    """The configured server's backend; ServerError for settings that cannot work."""
    if not options.server_url:
        raise ServerError(f"models.backend {options.backend} needs models.server_url (http://host:port)")
    api_key = ""
    if options.api_key_env:
        api_key = environ.get(options.api_key_env, "")
        if not api_key:
            raise ServerError(f"models.api_key_env names {options.api_key_env}, which is not set in the "
                              "environment completer runs in")
    timeouts = (options.server_connect_timeout_s, options.server_timeout_s)
    if options.backend == "openai":
        return OpenAIBackend(OpenAIClient(options.server_url, api_key, *timeouts), options.prompt_family,
                             options.context_tokens)
    return LlamaServerBackend(LlamaServerClient(options.server_url, api_key, *timeouts), options.prompt_family)


@dataclass
class Link:
    """The server as requests find it: its model once connected; while it fails, why,
    and when to try again (a backoff doubling from FIRST_RETRY_S to MAX_RETRY_S)."""

    model: ServerModel | None = None
    error: str = ""
    retry_at: float = 0.0
    backoff_s: float = 0.0

    def due(self, now: float) -> bool:
        return self.model is None and now >= self.retry_at

    def failed(self, reason: str, now: float) -> None:
        """The server failed a request or a connection. The reason that began the outage
        is the one kept (the user hears of an outage once, whatever its retries meet)."""
        self.model, self.error = None, self.error or reason
        self.backoff_s = min(MAX_RETRY_S, self.backoff_s * 2) if self.backoff_s else FIRST_RETRY_S
        self.retry_at = now + self.backoff_s

    def connected(self, model: ServerModel) -> None:
        self.model, self.error, self.backoff_s = model, "", 0.0


class RemoteCompleter:
    """Completions for every document from a server; the newest request for a document
    wins. Requests for different documents run at once (in different slots). The same
    calls as session.Completer, which the language server makes."""

    def __init__(self, backend: Backend, config: Config | None = None, workspace: Workspace | None = None):
        self.backend = backend
        self.workspace = workspace or Workspace([])
        self.ring = ChunkRing(self.workspace, self._count)
        self.link = Link()
        self.slots = SlotMap(1)
        self.sessions: dict[str, CompletionSession] = {}
        self.counters = Counters()
        self.current: str | None = None  # the document of the last request: the one the user is in
        self._state = threading.Lock()  # sessions, slots, the link, running requests, counters
        self._connecting = threading.Lock()  # one connection attempt at a time
        self._running: dict[str, CancelFlag] = {}
        self._slot_locks: dict[int, threading.Lock] = {}
        self.configure(config or Config())

    def _count(self, text: str) -> int:
        return self.backend.count(text)

    def connect(self) -> ServerModel | None:
        """The server's model, connecting first when it is due (at once after a failure
        backs off); None while the server cannot be used (link.error says why)."""
        with self._connecting:
            with self._state:
                if not self.link.due(time.monotonic()):
                    return self.link.model
            try:
                model = self.backend.connect()
            except ServerError as error:
                self._failed(str(error))
                return None
            with self._state:
                self.link.connected(model)
                self.slots = SlotMap(model.slots)  # a restarted server kept no slot's cache
            return model

    def _failed(self, reason: str) -> None:
        with self._state:
            self.link.failed(reason, time.monotonic())

    def configure(self, config: Config) -> None:
        """New options, from the next request on."""
        self.config = config
        self.ring.capacity, self.ring.chunk_lines = config.prompt.chunks, config.prompt.chunk_lines

    def cancel(self, document: str) -> None:
        with self._state:
            if document in self._running:
                self._running[document].set()

    def close(self, document: str) -> None:
        """The editor closed the document: its session goes, its slot is free again."""
        self.cancel(document)
        with self._state:
            self.sessions.pop(document, None)
            self.slots.forget(document)

    def saved(self, path: str, text: str) -> None:
        """Nothing to do: drafting is the server's."""

    def index_workspace(self) -> None:
        """No index here: drafting is the server's."""
        return None

    def begin(self, document: str) -> CancelFlag:
        """The cancel flag of a new request for `document`; older ones are cancelled."""
        with self._state:
            if document in self._running:
                self._running[document].set()
            cancel = self._running[document] = CancelFlag()
        return cancel

    def warm(self, request: CompletionRequest) -> int:
        """Evaluate the prompt a request at this cursor would have into the document's
        slot, generating nothing (llama.vim's n_predict 0); the prompt tokens the server
        evaluated."""
        if not 0 <= request.cursor <= len(request.text):
            raise PositionError(f"offset {request.cursor} is outside the document ({len(request.text)} characters)")
        model = self.connect()
        if model is None:
            return 0
        try:
            _, slot = self._enter(request)
            prompt, _, _ = self.prompt(request, model)
            with self._slot_lock(slot):
                result = self.backend.generate(prompt, slot, 0, [], Sampling(), 0, CancelFlag())
        except ServerError as error:
            self._failed(str(error))
            return 0
        warmed = int(result.timings.get("prompt_n", 0))
        with self._state:
            self.counters.warmed_tokens += warmed
        return warmed

    def complete(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> Completion:
        completion = self._complete(request, cancel)
        completion.warning = self.link.error
        return completion

    def stats(self) -> CompleterStats:
        with self._state:
            return self.counters.stats(server_error=self.link.error, sessions=len(self.sessions))

    def reset(self) -> None:
        """Forget every document, as if just loaded (the server keeps its caches)."""
        with self._state:
            self.sessions.clear()
            self.slots = SlotMap(self.link.model.slots if self.link.model else 1)
            self.current = None

    def cursor_context(self, request: CompletionRequest, suffix: str | None = None) -> CursorContext:
        line_before, around = cursor_sections(request.text, request.cursor, 0, self.config.prompt.suffix_lines)
        return CursorContext(line_before, around if suffix is None else suffix)

    def prompt(self, request: CompletionRequest, model: ServerModel) -> tuple[list[int] | str, int, str]:
        room = model.context_tokens - self.config.generation.max_tokens - 1
        return fit_prompt(request, self.config.prompt, model.template, room, self.workspace, self.ring,
                          self.backend.encode)

    def _enter(self, request: CompletionRequest) -> tuple[CompletionSession, int]:
        """The document's session and slot (-1: the server's choice); the document the user
        left becomes a context chunk (measured in the server's tokens: ServerError)."""
        with self._state:
            session = self.sessions.setdefault(request.document, CompletionSession(request.path))
            left = self.sessions.get(self.current) if self.current not in (None, request.document) else None
            self.current = request.document
            session.text, session.cursor = request.text, request.cursor
            slot = self.slots.slot_for(request.document) if self.config.models.server_slots == "pin" else -1
        if left is not None and left.text:
            self.ring.add(left.path, left.text, left.cursor)
        return session, slot

    def _complete(self, request: CompletionRequest, cancel: CancelFlag | None) -> Completion:
        if not 0 <= request.cursor <= len(request.text):
            raise PositionError(f"offset {request.cursor} is outside the document ({len(request.text)} characters)")
        text_before = request.text[: request.cursor]
        cancel = cancel or self.begin(request.document)
        try:
            with self._state:
                self.counters.requests += 1
                session = self.sessions.setdefault(request.document, CompletionSession(request.path))
                rest = session.forward.lookup(text_before, self.cursor_context(request))
                if rest is not None:
                    self.counters.forward_cache_hits += 1
                    return Completion(rest, "forward cache")
            model = self.connect()
            if model is None:
                return Completion("", "server down", "unavailable")
            if cancel.is_set():
                return self._superseded()
            return self._generate(request, model, text_before, cancel)
        finally:
            with self._state:
                if self._running.get(request.document) is cancel:
                    del self._running[request.document]

    def _generate(self, request: CompletionRequest, model: ServerModel, text_before: str,
                  cancel: CancelFlag) -> Completion:
        options = self.config.generation
        try:
            session, slot = self._enter(request)
            prompt, length, suffix = self.prompt(request, model)
            cursor = self.cursor_context(request, suffix)
            with self._slot_lock(slot):
                result = self.backend.generate(
                    prompt, slot, options.max_tokens, stops_for(cursor),
                    Sampling(options.temperature, options.top_k, options.top_p), options.time_budget_ms, cancel,
                    done=lambda text: cut_to_scope(text, cursor) != text)
        except ServerError as error:
            self._failed(str(error))
            return Completion("", "server down", "unavailable")
        if result.stop_reason == "cancelled":
            return self._superseded()
        shown = postprocess(result.text, cursor, timed_out=result.stop_reason == "time")
        with self._state:
            session.forward.remember(text_before, result.text, shown, result.stop_reason == "time")
            if result.timings:  # a stream closed early (`done`) ends without the server's counts
                self.counters.prompt_tokens += length
                self.counters.add_remote(result)
        return Completion(shown, "model", result.stop_reason, prompt, int(result.timings.get("prompt_n", 0)),
                          remote=result)

    def _slot_lock(self, slot: int) -> AbstractContextManager:
        """One request at a time in a pinned slot (two documents may share one): llama-server
        would queue the second anyway, and its RAM prompt cache can hand a request
        another's text when requests for one slot overlap (llama.cpp issue 27148)."""
        if slot < 0:
            return nullcontext()
        with self._state:
            return self._slot_locks.setdefault(slot, threading.Lock())

    def _superseded(self) -> Completion:
        with self._state:
            self.counters.superseded += 1
        return Completion("", "superseded", "cancelled")

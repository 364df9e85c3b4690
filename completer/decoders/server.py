"""Decoding on a server: llama-server's own API, or any OpenAI-compatible
/v1/completions (vLLM, llama-server). The server decodes, with its own speculation and
KV cache; the editor side (session.Completer) keeps the rest.

    connect: the server's model, slots and FIM family; while it is down, why, and
             another try after a backoff
    decode:  the request's prompt made with the server's tokenizer: token ids from its
             /tokenize (a file's text can never become a control token), or text with
             every special token's spelling taken out (OpenAI's API); generated on the
             server in the document's slot (the server's choice, the one sharing most
             with the prompt, or with models.server_slots pin the document's own, least
             recently used giving theirs up), streamed; a cancel flag closes the stream
"""

import logging
import math
import re
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Protocol

from completer.config import Config, ModelOptions
from completer.decoders.clients import LlamaServerClient, OpenAIClient, RemoteGeneration, ServerProps
from completer.decoders.decoder import (Closed, Decode, DecodeCounts, Decoded, DecodeRequest, DecoderModel,
                                        DocumentEvent, Prompt, ready, with_length)
from completer.decoders.server_metrics import ServerMetrics
from completer.engine.speculative import Sampling
from completer.errors import Cancelled, Refused, ServerError, Unavailable
from completer.prompt import (TEMPLATES, FimTemplate, Segment, control_token, template_for, text_prompt,
                              tokenize_segments)
from completer.requests import CancelFlag
from completer.workspace import Workspace

log = logging.getLogger(__name__)

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
# How often a request waiting for its document's exchange looks at its cancel flag.
EXCHANGE_POLL_S = 0.01


@dataclass(frozen=True)
class ServerModel:
    """What the server runs, as the completer needs it."""

    name: str  # the model file's name (or the served model's id)
    slots: int  # 0: an API without slots
    context_tokens: int  # per slot
    template: FimTemplate | None

    def summary(self, speculation: dict[str, float | int | str]) -> str:
        """A line for doctor and the bench, with what ServerAPI.speculation says."""
        speculative = ", ".join(f"{key} {value}" for key, value in speculation.items()) or "not reported"
        family = self.template.family if self.template else "none (a prefix-only prompt)"
        slots = (f"{self.slots} slot{'s' * (self.slots != 1)} of {self.context_tokens} tokens" if self.slots else
                 f"a context of {self.context_tokens} tokens (no slots: the server's own prefix cache)")
        return f"model {self.name}, {slots}, FIM family {family}, speculative: {speculative}"


class ServerAPI(Protocol):
    """A server, as ServerDecoder drives it. Every call raises ServerError with the
    reason when the server cannot be used."""

    url: str

    def connect(self) -> ServerModel: ...

    def speculation(self) -> dict[str, float | int | str]:
        """What the server says of its drafting, for doctor and the bench. It costs requests
        a completion never needs (vLLM's /server_info runs its collect_env), so connect,
        which the language server calls at start-up and after every outage, does not ask."""
        ...

    def encode(self, segments: list[Segment], cancel: CancelFlag | None = None) -> tuple[list[int] | str, int]: ...

    def count(self, text: str, cancel: CancelFlag | None = None) -> int: ...

    def text_of(self, prompt: list[int] | str, cancel: CancelFlag | None = None) -> str: ...

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

    def tokenize(self, text: str, parse_special: bool = False, cancel: CancelFlag | None = None) -> list[int]:
        key = (text, parse_special)
        with self._lock:
            if key in self._tokens:
                return self._tokens[key]
        tokens = self.client.tokenize(text, parse_special, cancel)
        with self._lock:
            if len(self._tokens) >= TOKENIZED_TEXTS:
                del self._tokens[next(iter(self._tokens))]
            self._tokens[key] = tokens
        return tokens

    def token_text(self, token: int, cancel: CancelFlag | None = None) -> str:
        with self._lock:
            if token in self._texts:
                return self._texts[token]
        text = self.client.detokenize([token], cancel)
        with self._lock:  # only control tokens are asked for: a few, kept for good
            self._texts[token] = text
        return text

    def under(self, cancel: CancelFlag | None) -> "RequestVocabulary":
        """The vocabulary as one request's prompt asks it: its calls stop at `cancel`."""
        return RequestVocabulary(self, cancel)


@dataclass(frozen=True)
class RequestVocabulary:
    """The server's vocabulary (prompt.Vocabulary) for one request: a /tokenize that the
    request's cancel flag closes, so that a stalled server holds no worker past a newer
    keystroke. The answers are kept in the shared ServerVocabulary."""

    vocabulary: ServerVocabulary
    cancel: CancelFlag | None

    def tokenize(self, text: str, parse_special: bool = False) -> list[int]:
        return self.vocabulary.tokenize(text, parse_special, self.cancel)

    def token_text(self, token: int) -> str:
        return self.vocabulary.token_text(token, self.cancel)

    def token_bytes(self, token: int) -> bytes:
        return self.token_text(token).encode()


def prompt_start(client: LlamaServerClient) -> list[int]:
    """The tokens the server's vocabulary starts a prompt with (BOS, for Gemma's): llama-server
    adds them to a prompt given as text, never to one given as token ids, as ours are.
    Found as what /tokenize puts before a text's own tokens when asked to add them."""
    text = client.tokenize("a", parse_special=False)
    framed = client.tokenize("a", parse_special=False, add_special=True)
    starts = [at for at in range(len(framed) - len(text) + 1) if framed[at:at + len(text)] == text]
    return framed[:starts[0]] if starts else []


def refuse_a_server_parsing_text_as_control_tokens(url: str, vocabulary: ServerVocabulary, props: ServerProps,
                                                   template: FimTemplate | None) -> None:
    """A file's text reaches llama-server as the ids its /tokenize made with parse_special
    false, so that it can never become a control token: a server that parses control text
    anyway (a build from before the flag, or one that ignores it) would let a file spell
    the prompt's structure or an end of text. Tried on one control token of the
    vocabulary (its end token, else a FIM token); such a server is refused."""
    for text in (*props.special_texts, *(template.required_tokens() if template else ())):
        token = control_token(vocabulary, text)
        if token is None:
            continue
        if token in vocabulary.tokenize(text, parse_special=False):
            build = f"its build {props.build}" if props.build else "its /props names no build"
            raise ServerError(f"{url}/tokenize makes the text {text!r} into its control token {token} although "
                              f"asked not to (parse_special false; {build}): a file could then spell control "
                              "tokens into prompts. Use a llama-server of a current llama.cpp")
        return


class LlamaServerAPI:
    """llama-server's own API: prompts as token ids (so that a file's text can never
    become a control token), its slots, its timings and drafts."""

    def __init__(self, client: LlamaServerClient, family: str = "auto"):
        self.client, self.url, self.family = client, client.url, family
        self.vocabulary = ServerVocabulary(client)
        self.bos: list[int] = []  # what the server's vocabulary starts a prompt with (connect)

    @classmethod
    def from_options(cls, options: ModelOptions, api_key: str) -> "LlamaServerAPI":
        client = LlamaServerClient(options.server_url, api_key, options.server_connect_timeout_s,
                                   options.server_timeout_s)
        return cls(client, options.prompt_family)

    def connect(self) -> ServerModel:
        props: ServerProps = self.client.props()
        self.vocabulary = ServerVocabulary(self.client)  # a restarted server may run another model
        self.bos = prompt_start(self.client)
        detected = template_for(self.vocabulary)
        refuse_a_server_parsing_text_as_control_tokens(self.url, self.vocabulary, props, detected)
        name = Path(props.model).name or props.model
        template = detected if self.family == "auto" else template_named(self.family)
        if self.family not in ("auto", "none") and template != detected:
            has = f"{detected.family}'s FIM tokens" if detected else "no FIM tokens"
            raise ServerError(f"models.prompt_family is {self.family}, but the server's model {name} has {has}: "
                              "set models.prompt_family to auto")
        return ServerModel(name, props.slots, props.context_tokens, template)

    def speculation(self) -> dict[str, float | int | str]:
        speculative: dict[str, float | int | str] = dict(self.client.props().speculative)
        try:  # the slots say whether the server drafts (a draft model or n-gram lookup); --no-slots hides them
            speculative["drafting"] = "yes" if any(slot.get("speculative") for slot in self.client.slots()) else "no"
        except ServerError:
            pass
        if speculative.get("drafting") != "no":
            # The pinned build's request schema (tools/server/server-schema.cpp) has the
            # speculative.* fields under `#if 0`: a client cannot lower the draft length.
            speculative["backs off under load"] = ("no: this llama-server takes no speculative settings per "
                                                   "request; the client backs off (lsp.back_off)")
        return speculative

    def encode(self, segments: list[Segment], cancel: CancelFlag | None = None) -> tuple[list[int], int]:
        return with_length(self.bos + tokenize_segments(self.vocabulary.under(cancel), segments))

    def count(self, text: str, cancel: CancelFlag | None = None) -> int:
        return len(self.vocabulary.tokenize(text, False, cancel))

    def text_of(self, prompt: list[int], cancel: CancelFlag | None = None) -> str:
        return self.client.detokenize(prompt, cancel)

    def generate(self, prompt: list[int], slot: int, max_tokens: int, stop: list[str], sampling: Sampling,
                 time_budget_ms: float, cancel: CancelFlag, done=None) -> RemoteGeneration:
        return self.client.complete(prompt, max_tokens, slot, stop, sampling, time_budget_ms, cancel, done)


def template_in_name(name: str) -> FimTemplate | None:
    """The family a served model's name says (`Qwen/Qwen2.5-Coder-7B` is qwen2.5-coder's),
    letters and digits compared; None when it names none."""
    squashed = _letters_and_digits(name)
    return next((template for template in TEMPLATES if _letters_and_digits(template.family) in squashed), None)


def _letters_and_digits(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def served_context(entry: dict) -> int:
    """The context a /v1/models entry says a request has: vLLM's max_model_len, or
    llama-server's meta.n_ctx (its context per slot); 0 when it says neither."""
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for value in (entry.get("max_model_len"), meta.get("n_ctx")):
        if type(value) is int and value > 0:
            return value
    return 0


class OpenAIAPI:
    """An OpenAI-compatible /v1/completions: the prompt as text with the family's control
    tokens spelt out, which the server's tokenizer parses (every special token's spelling
    is taken out of a file's text first, so that it cannot inject one). Lengths are
    estimated at CHARS_PER_TOKEN, since the API has no tokenizer."""

    def __init__(self, client: OpenAIClient, family: str = "auto",
                 context_tokens: int = ModelOptions().context_tokens):
        self.client, self.url, self.family = client, client.url, family
        self.context_tokens = context_tokens  # models.context_tokens: for a server that does not say
        self.model = ""

    @classmethod
    def from_options(cls, options: ModelOptions, api_key: str) -> "OpenAIAPI":
        client = OpenAIClient(options.server_url, api_key, options.server_connect_timeout_s, options.server_timeout_s)
        return cls(client, options.prompt_family, options.context_tokens)

    def connect(self) -> ServerModel:
        entry = self.client.models()[0]
        self.model = str(entry["id"])
        template = template_in_name(self.model) if self.family == "auto" else template_named(self.family)
        return ServerModel(self.model, 0, served_context(entry) or self.context_tokens, template)

    def speculation(self) -> dict[str, float | int | str]:
        """What its /metrics says of its speculation and caches (vLLM's), and its served
        speculative config; "not served" where there are none (another OpenAI-compatible server)."""
        try:
            return ServerMetrics.of(self.client.metrics()).described(self.client.speculative_config())
        except ServerError as error:
            return {"metrics": f"not served ({error})"}

    def encode(self, segments: list[Segment], cancel: CancelFlag | None = None) -> tuple[str, int]:
        text = text_prompt(segments)
        return text, self.count(text)

    def count(self, text: str, cancel: CancelFlag | None = None) -> int:
        return math.ceil(len(text) / CHARS_PER_TOKEN)

    def text_of(self, prompt: str, cancel: CancelFlag | None = None) -> str:
        return prompt

    def generate(self, prompt: str, slot: int, max_tokens: int, stop: list[str], sampling: Sampling,
                 time_budget_ms: float, cancel: CancelFlag, done=None) -> RemoteGeneration:
        """A warm (max_tokens 0) asks for one token: vLLM answers max_tokens 0 with HTTP 400
        ("max_tokens must be at least 1"), where llama-server evaluates the prompt alone."""
        return self.client.complete(self.model, prompt, max(max_tokens, 1), stop, sampling, time_budget_ms, cancel,
                                    done)


@dataclass
class ServerConnection:
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




class ServerDecoder:
    """A server as a Decoder. Requests for different documents run at once, in different
    slots; only a server that cannot be reached or fails (5xx, a broken stream, the
    deadline) is down (Unavailable), one refusing a request (4xx) fails it alone (Refused)."""

    def __init__(self, api: ServerAPI):
        self.api = api
        self.connection = ServerConnection()
        self.slots = SlotMap(1)
        self.config = Config()
        self._state = threading.Lock()  # the connection, the slots
        self._connecting = threading.Lock()  # one connection attempt at a time
        self._exchange_locks: dict[str, threading.Lock] = {}  # by document, or by pinned slot

    @property
    def url(self) -> str:
        return self.api.url

    @property
    def warning(self) -> str:
        return self.connection.error

    def server_model(self) -> ServerModel | None:
        """The server's model, connecting first when it is due (at once after a failure
        backs off); None while the server cannot be used (`warning` says why)."""
        with self._state:
            if not self.connection.due(time.monotonic()):
                return self.connection.model
        # Another request's attempt under way: not waited for (a stalled server would hold
        # every worker here for the attempt's deadlines), this one is answered as down.
        if not self._connecting.acquire(blocking=False):
            return None
        try:
            with self._state:
                if not self.connection.due(time.monotonic()):
                    return self.connection.model
            try:
                model = self.api.connect()
            except ServerError as error:
                self._failed(str(error))
                return None
            with self._state:
                self.connection.connected(model)
                self.slots = SlotMap(model.slots)  # a restarted server kept no slot's cache
            return model
        finally:
            self._connecting.release()

    def connect(self) -> DecoderModel | None:
        server = self.server_model()
        return self._model(server, None) if server is not None else None

    def _model(self, server: ServerModel, cancel: CancelFlag | None) -> DecoderModel:
        """The server's model as prompts are made for it; its tokenizer's calls stop at `cancel`."""
        return DecoderModel(server.template, server.context_tokens,
                            f"the server's {server.context_tokens} tokens a slot",
                            encode=partial(self._encode, cancel=cancel), count=partial(self._count, cancel=cancel),
                            text_of=self._text_of, shared=True)

    def _failed(self, reason: str) -> None:
        with self._state:
            self.connection.failed(reason, time.monotonic())

    @contextmanager
    def _faults(self):
        """The server's failures as a Decoder's: a refusal for this request, or the server down."""
        try:
            yield
        except ServerError as error:
            if error.request_fault:
                raise Refused(str(error), error.context_exceeded) from None
            self._failed(str(error))  # an Unavailable: the Completer answers that the server is down
            raise

    def configure(self, config: Config) -> None:
        self.config = config

    def _encode(self, segments: list[Segment], cancel: CancelFlag | None) -> tuple[list[int] | str, int]:
        with self._faults():
            return self.api.encode(segments, cancel)

    def _count(self, text: str, cancel: CancelFlag | None) -> int:
        with self._faults():
            return self.api.count(text, cancel)

    def _text_of(self, prompt: list[int] | str) -> str:
        with self._faults():
            return self.api.text_of(prompt)

    def _prompt(self, request: DecodeRequest, room: int | None = None) -> Prompt:
        """The request's prompt made for the server's model, in at most `room` tokens (by
        default the context less the answer's room); Unavailable while the server is down,
        Cancelled when the request was. Requests for other documents go on at once: a
        server has no turn to wait for (a pinned slot is locked in decoding)."""
        server = self.server_model()
        if server is None:
            raise Unavailable(self.warning)
        if request.cancel.is_set():
            raise Cancelled
        model = self._model(server, request.cancel)
        return request.prompt(model, model.context_tokens - request.answer_tokens if room is None else room)

    def decode(self, request: DecodeRequest) -> Decoded:
        """The server keeps its own caches and drafts from them: nothing to enter. A prompt
        it finds longer than its context (our count was an estimate, or its slots shrank)
        is made once more at half the length, where the request allows."""
        prompt = self._prompt(request)
        try:
            decoded = self._generate(ready(request, prompt))
        except Refused as refused:
            if not (refused.context_exceeded and request.retry_shorter):
                raise
            log.info("%s: trying once more with a prompt of at most %d tokens", refused, prompt.length // 2)
            prompt = self._prompt(request, prompt.length // 2)
            decoded = self._generate(ready(request, prompt))
        return replace(decoded, prompt=prompt)

    def _generate(self, decode: Decode) -> Decoded:
        slot = self._slot(decode.document)
        with self._faults(), self._in_flight(decode.document, slot, decode.cancel):
            result = self.api.generate(decode.prompt, slot, decode.max_tokens, decode.stop, decode.sampling,
                                       decode.time_budget_ms, decode.cancel, done=decode.done)
        return Decoded(result.text, result.stop_reason, server_counts(result, decode.prompt_length), result)

    def warm(self, request: DecodeRequest) -> int:
        """The prompt evaluated into the document's slot, generating nothing (llama.vim's n_predict 0)."""
        prompt = self._prompt(request)
        slot = self._slot(request.document)
        with self._faults(), self._in_flight(request.document, slot, request.cancel):
            result = self.api.generate(prompt.tokens, slot, 0, [], Sampling(), 0, CancelFlag())
        return int(result.timings.get("prompt_n", 0))

    def _slot(self, document: str) -> int:
        """The document's slot; -1, the server's choice, unless models.server_slots pins one."""
        if self.config.models.server_slots != "pin":
            return -1
        with self._state:
            return self.slots.slot_for(document)

    @contextmanager
    def _in_flight(self, document: str, slot: int, cancel: CancelFlag):
        """One exchange at a time per document, and per pinned slot (two documents may share
        one). A superseded request's stream may still be closing when the next one comes;
        on a shared server both would take a place in its batch for one answer. A pinned
        slot's requests overlapping can also get another's text from llama-server's RAM
        prompt cache (llama.cpp issue 27148), and the server would queue them anyway.
        Waiting ends at `cancel` (Cancelled)."""
        key = f"slot {slot}" if slot >= 0 else f"document {document}"
        with self._state:
            lock = self._exchange_locks.setdefault(key, threading.Lock())
        while not lock.acquire(timeout=EXCHANGE_POLL_S):
            if cancel.is_set():
                raise Cancelled
        try:
            yield
        finally:
            lock.release()

    def document_event(self, event: DocumentEvent) -> None:
        """A closed document's slot is free again; a save changes nothing here (drafting is the server's)."""
        if isinstance(event, Closed):
            with self._state:
                self.slots.forget(event.document)
                self._exchange_locks.pop(f"document {event.document}", None)

    def reset(self) -> None:
        """The slots given out again (the server keeps its caches)."""
        with self._state:
            self.slots = SlotMap(self.connection.model.slots if self.connection.model else 1)

    def index_workspace(self, workspace: Workspace) -> None:
        """No index here: drafting is the server's."""
        return None

    def stop_indexing(self) -> None:
        """No index to stop."""

    def statistics(self) -> dict:
        return {"server_error": self.connection.error}


def server_counts(result: RemoteGeneration, prompt_tokens: int) -> DecodeCounts | None:
    """A server's own counts, from the timings a finished stream ends with: prompt tokens
    it evaluated, what it generated and in how long, drafted and accepted; None for a
    stream closed early (`done`), which ends without them."""
    timings = result.timings
    if not timings:
        return None
    return DecodeCounts(prompt_tokens, int(timings.get("prompt_n", 0)), int(timings.get("predicted_n", 0)),
                        float(timings.get("predicted_ms", 0.0)) + float(timings.get("prompt_ms", 0.0)),
                        int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0)))


class SlotMap:
    """Which of the server's slots holds each document's prompt cache: a document keeps
    its slot while it is used, and a new one takes a free slot, else the least recently
    used document's."""

    def __init__(self, slots: int):
        self._free = list(range(max(1, slots)))
        self._documents: OrderedDict[str, int] = OrderedDict()  # least recently used first

    def slot_for(self, document: str) -> int:
        if document in self._documents:
            self._documents.move_to_end(document)
        else:
            self._documents[document] = self._free.pop(0) if self._free else self._documents.popitem(last=False)[1]
        return self._documents[document]

    def forget(self, document: str) -> None:
        """The document closed: its slot is free again."""
        slot = self._documents.pop(document, None)
        if slot is not None:
            self._free.insert(0, slot)

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

import logging
import math
import re
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Protocol

from completer.config import Config, ModelOptions
from completer.context import ChunkRing, Workspace, chunk_around
from completer.postprocess import CursorContext, cut_to_scope, postprocess, stops_for
from completer.prompt import (TEMPLATES, FimTemplate, Segment, control_token, cursor_sections, template_for,
                              tokenize_segments)
from completer.remote import (Cancelled, CancelFlag, LlamaServerClient, OpenAIClient, RemoteGeneration, RequestRefused,
                              ServerError, ServerProps, SlotMap)
from completer.session import (CompleterStats, Completion, CompletionRequest, CompletionSession, Counters,
                               PositionError, PromptTooLong, counted, fit_prompt, no_room)
from completer.speculative import Sampling

log = logging.getLogger("completer.remote")

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
# Every added token of each family's vocabulary (its tokenizer's added tokens; llama.cpp
# marks them control or user-defined): a server given the prompt as text parses each of
# these out of it (llama-server's parse_special, Hugging Face's added tokens, vLLM), so a
# file's text must spell none. All families' at once: the family is a guess from the
# model's name, and taking `<s>` out of a file's HTML costs less than an injected token.
SPECIAL_TOKENS = (
    # qwen2.5-coder: the <|...|> ones are SPECIAL_PATTERN's; these two are plain added tokens
    "<tool_call>", "</tool_call>",
    # starcoder (StarCoder2; SmolLM2 and StarCoder 1 have these and <reponame>, <filename>)
    "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<repo_name>", "<reponame>", "<file_sep>",
    "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>",
    "<jupyter_text>", "<jupyter_code>", "<jupyter_output>", "<jupyter_script>", "<empty_output>",
    "<code_to_intermediate>", "<intermediate_to_code>", "<pr>", "<pr_status>", "<pr_is_merged>", "<pr_base>",
    "<pr_file>", "<pr_base_code>", "<pr_diff>", "<pr_diff_hunk>", "<pr_comment>", "<pr_event_id>", "<pr_review>",
    "<pr_review_state>", "<pr_review_comment>", "<pr_in_reply_to_review_id>", "<pr_in_reply_to_comment_id>",
    "<pr_diff_hunk_comment_line>", "<NAME>", "<EMAIL>", "<KEY>", "<PASSWORD>",
    # deepseek-coder: the <｜...｜> ones are SPECIAL_PATTERN's
    "<pad>",
    # codellama: SentencePiece's controls, with and without the space marker
    "▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>", "<PRE>", "<SUF>", "<MID>", "<EOT>", "<s>", "</s>", "<unk>",
    # codestral (Mistral's v3 vocabulary): the [control_N] ones are SPECIAL_PATTERN's
    "[PREFIX]", "[SUFFIX]", "[MIDDLE]", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
)
# The spellings of whole families of special tokens, for vocabularies not listed above
# (an OpenAI-compatible server says nothing of its vocabulary): <|...|> (Qwen's, GPT-2's
# <|endoftext|>, Llama 3's, Phi's), DeepSeek's full-width <｜...｜>, Mistral's [control_N].
SPECIAL_PATTERN = r"<\|[^\s|<>]{1,64}\|>|<｜[^\s｜<>]{1,64}｜>|\[control_\d{1,4}\]"
SPECIAL_ANYWHERE = re.compile(f"{'|'.join(map(re.escape, SPECIAL_TOKENS))}|{SPECIAL_PATTERN}")
# The same spellings written backwards, matched at the start of a reversed text: the
# spelling a text ends with, in one anchored match (see without_special_tokens).
SPECIAL_REVERSED = re.compile("|".join(re.escape(token[::-1]) for token in SPECIAL_TOKENS)
                              + r"|>\|[^\s|<>]{1,64}\|<|>｜[^\s｜<>]{1,64}｜<|\]\d{1,4}_lortnoc\[")
# The longest spelling either matches: <| + 64 + |>, or the longest listed.
SPECIAL_LONGEST = max(68, *map(len, SPECIAL_TOKENS))
SPELLINGS_END = re.compile(r"[>\]]")  # every spelling's last character
assert all(token[-1] in ">]" for token in SPECIAL_TOKENS)


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
        refuse_a_server_parsing_text_as_control_tokens(self.url, self.vocabulary, props, detected)
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

    def encode(self, segments: list[Segment], cancel: CancelFlag | None = None) -> tuple[list[int], int]:
        return counted(tokenize_segments(self.vocabulary.under(cancel), segments))

    def count(self, text: str, cancel: CancelFlag | None = None) -> int:
        return len(self.vocabulary.tokenize(text, False, cancel))

    def text_of(self, prompt: list[int], cancel: CancelFlag | None = None) -> str:
        return self.client.detokenize(prompt, cancel)

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


def served_context(entry: dict) -> int:
    """The context a /v1/models entry says a request has: vLLM's max_model_len, or
    llama-server's meta.n_ctx (its context per slot); 0 when it says neither."""
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for value in (entry.get("max_model_len"), meta.get("n_ctx")):
        if type(value) is int and value > 0:
            return value
    return 0


def text_prompt(segments: list[Segment]) -> str:
    """The prompt as text: control tokens spelt out, and each run of plain text without
    special tokens (a run joined first: the seam of two pieces could spell one)."""
    return "".join(text if special else without_special_tokens(text)
                   for special, run in groupby(segments, key=lambda segment: segment.special)
                   for text in ["".join(segment.text for segment in run)])


def without_special_tokens(text: str) -> str:
    """`text` with every special token's spelling (SPECIAL_TOKENS, SPECIAL_PATTERN) taken
    out, to a fixed point: what is left spells none, also where taking one out joins its
    neighbours into another (`<|fim_<|fim_middle|>middle|>`). One pass, as brackets are
    matched: the text is kept a piece at a time, each piece ending at a `>` or `]` (where
    every spelling ends), and a spelling is taken out as soon as the kept text ends with
    one, so the kept text never holds one. Linear however deep the nesting."""
    first = SPECIAL_ANYWHERE.search(text)
    if first is None:
        return text
    kept = list(text[: first.start()])  # spells none: a spelling ending sooner would start sooner
    start = first.start()
    for end in SPELLINGS_END.finditer(text, start):
        kept += text[start : end.end()]
        start = end.end()
        if found := SPECIAL_REVERSED.match("".join(reversed(kept[-SPECIAL_LONGEST:]))):
            del kept[-found.end():]
    kept += text[start:]
    return "".join(kept)


class OpenAIBackend:
    """An OpenAI-compatible /v1/completions: the prompt as text with the family's control
    tokens spelt out, which the server's tokenizer parses (every special token's spelling
    is taken out of a file's text first, so that it cannot inject one). Lengths are
    estimated at CHARS_PER_TOKEN, since the API has no tokenizer."""

    def __init__(self, client: OpenAIClient, family: str = "auto", context_tokens: int = 4096):
        self.client, self.url, self.family = client, client.url, family
        self.context_tokens = context_tokens  # models.context_tokens: for a server that does not say
        self.model = ""

    def connect(self) -> ServerModel:
        entry = self.client.models()[0]
        self.model = str(entry["id"])
        template = template_in_name(self.model) if self.family == "auto" else template_named(self.family)
        return ServerModel(self.model, 0, served_context(entry) or self.context_tokens, template)

    def encode(self, segments: list[Segment], cancel: CancelFlag | None = None) -> tuple[str, int]:
        text = text_prompt(segments)
        return text, self.count(text)

    def count(self, text: str, cancel: CancelFlag | None = None) -> int:
        return math.ceil(len(text) / CHARS_PER_TOKEN)

    def text_of(self, prompt: str, cancel: CancelFlag | None = None) -> str:
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


class SharedRing(ChunkRing):
    """The ring of context chunks as requests on several worker threads share it: one
    add, select or resize at a time (an add builds the ring's new list from the old one,
    so two at once would lose one's chunk, and a select would read a list being cut)."""

    def __init__(self, workspace: Workspace, count_tokens):
        super().__init__(workspace, count_tokens)
        self._lock = threading.Lock()

    def add(self, path: str, text: str, cursor: int) -> bool:
        with self._lock:
            return super().add(path, text, cursor)

    def select(self, budget_tokens: int, exclude: str = ""):
        with self._lock:
            return super().select(budget_tokens, exclude)

    def resize(self, capacity: int, chunk_lines: int) -> None:
        with self._lock:
            self.capacity, self.chunk_lines = capacity, chunk_lines


class RemoteCompleter:
    """Completions for every document from a server; the newest request for a document
    wins. Requests for different documents run at once (in different slots). The same
    calls as session.Completer, which the language server makes."""

    def __init__(self, backend: Backend, config: Config | None = None, workspace: Workspace | None = None):
        self.backend = backend
        self.workspace = workspace or Workspace([])
        self.ring = SharedRing(self.workspace, self._count)
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
        with self._state:
            if not self.link.due(time.monotonic()):
                return self.link.model
        # Another request's attempt under way: not waited for (a stalled server would hold
        # every worker here for the attempt's deadlines), this one is answered as down.
        if not self._connecting.acquire(blocking=False):
            return None
        try:
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
        finally:
            self._connecting.release()

    def _failed(self, reason: str) -> None:
        with self._state:
            self.link.failed(reason, time.monotonic())

    def configure(self, config: Config) -> None:
        """New options, from the next request on."""
        self.config = config
        self.ring.resize(config.prompt.chunks, config.prompt.chunk_lines)

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

    def stop_indexing(self) -> None:
        """No index to stop."""

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
        except RequestRefused as error:
            log.warning("%s (this request only: the server is up)", error)
            return 0
        except PromptTooLong:
            return 0  # the request will say so
        except ServerError as error:
            self._failed(str(error))
            return 0
        warmed = int(result.timings.get("prompt_n", 0))
        with self._state:
            self.counters.warmed_tokens += warmed
        return warmed

    def complete(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> Completion:
        completion = self._complete(request, cancel)
        completion.warning = completion.warning or self.link.error
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

    def prompt(self, request: CompletionRequest, model: ServerModel, cancel: CancelFlag | None = None,
               room: int | None = None) -> tuple[list[int] | str, int, str]:
        """The request's prompt in at most `room` tokens (by default the context per slot
        less the answer's); its server calls stop at `cancel` (Cancelled)."""
        if room is None:
            room = model.context_tokens - self.config.generation.max_tokens - 1
        return fit_prompt(request, self.config.prompt, model.template, room, self.workspace, self.ring,
                          lambda segments: self.backend.encode(segments, cancel))

    def _enter(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> tuple[CompletionSession, int]:
        """The document's session and slot (-1: the server's choice); the document the user
        left becomes a context chunk (measured in the server's tokens: ServerError)."""
        with self._state:
            session = self.sessions.setdefault(request.document, CompletionSession(request.path))
            left = self.sessions.get(self.current) if self.current not in (None, request.document) else None
            self.current = request.document
            session.text, session.cursor = request.text, request.cursor
            slot = self.slots.slot_for(request.document) if self.config.models.server_slots == "pin" else -1
        if left is not None and left.text and self.workspace.contains(left.path):
            # Counted here, under the request's cancel flag and outside the ring's lock (a
            # /tokenize): the ring's own count then finds it in the vocabulary's answers.
            self.backend.count(chunk_around(left.text, left.cursor, self.ring.chunk_lines), cancel)
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
        """The server's answer. Only a server that cannot be reached or fails (5xx, a
        broken stream, the deadline) is down; one refusing this request (RequestRefused)
        fails it alone, and one saying the prompt exceeds its context is asked once more
        with a prompt half as long (our count was an estimate, or its slots shrank)."""
        try:
            session, slot = self._enter(request, cancel)
            prompt, length, suffix = self.prompt(request, model, cancel)
            try:
                result, cursor = self._decode(request, prompt, suffix, slot, cancel)
            except RequestRefused as refused:
                if not refused.context_exceeded:
                    raise
                log.info("%s: trying once more with a prompt of at most %d tokens", refused, length // 2)
                prompt, length, suffix = self.prompt(request, model, cancel, room=length // 2)
                result, cursor = self._decode(request, prompt, suffix, slot, cancel)
        except Cancelled:
            return self._superseded()
        except PromptTooLong as error:
            return no_room(error, f"the server's {model.context_tokens} tokens a slot",
                           self.config.generation.max_tokens)
        except RequestRefused as error:
            log.warning("%s (this request only: the server is up)", error)
            return Completion("", "refused", "unavailable")
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

    def _decode(self, request: CompletionRequest, prompt: list[int] | str, suffix: str, slot: int,
                cancel: CancelFlag) -> tuple[RemoteGeneration, CursorContext]:
        """The server's generation after `prompt`, and the cursor it is post-processed at."""
        options = self.config.generation
        cursor = self.cursor_context(request, suffix)
        with self._slot_lock(slot):
            result = self.backend.generate(
                prompt, slot, options.max_tokens, stops_for(cursor),
                Sampling(options.temperature, options.top_k, options.top_p), options.time_budget_ms, cancel,
                done=lambda text: cut_to_scope(text, cursor) != text)
        return result, cursor

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

"""Completions for documents being edited: one engine, a session per document.

    request (document text, cursor)
      -> forward cache: the user typed the start of what is shown? its rest, no model call
      -> newest request wins: an older one for the document is cancelled
      -> the document's caches made live (saved states of others, LRU within a budget)
      -> prompt: other files' chunks, path, prefix [, suffix], stablest first
      -> token healing at the cursor
      -> generate (the live caches keep the longest common prefix with the prompt)
      -> post-process, remember for the forward cache

The engine serves one document at a time from its live caches. When the editor
switches to another document, the live caches are saved to memory (llama.cpp's
per-sequence state) and the other document's are put back, so returning to a
recently used document evaluates only what changed.
"""

import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from completer.config import Config, PromptOptions
from completer.context import ChunkRing, Workspace
from completer.engine import Engine, Generation, generate
from completer.healing import TokenPrefixes, heal
from completer.postprocess import CursorContext, cut_to_scope, postprocess, stops_for
from completer.prompt import FimTemplate, Segment, cursor_sections, render, template_for, tokenize_segments
from completer.remote import RemoteGeneration
from completer.speculative import Sampling
from completer.workspace_index import WorkspaceIndex, saved_index_path

# Tokens evaluated per turn of warming, between which a completion request takes the
# engine. Measured on a 2-core AVX2 CPU with smol, 2,000-3,000 tokens into a prompt:
# prefill runs at 150-190 tokens/s there, pieces of 64 at about 140, so a request waits
# at most about 0.4 s for the piece under way; larger pieces would run faster and make
# it wait longer.
WARM_PIECE = 64

P = TypeVar("P")  # a prompt as a backend takes it


@dataclass
class Snapshot:
    """A document's saved caches: (tokens, state) per live sequence."""

    sequences: list[tuple[list[int], bytes]]

    @property
    def size_bytes(self) -> int:
        return sum(len(state) for _, state in self.sequences)


class DocumentCaches:
    """The live document's name and the others' saved caches. Switching runs with the
    engine; `saved_bytes` is read from any thread (statistics), so `saved` changes and
    is read only under its own lock."""

    def __init__(self, engine: Engine, budget_mb: float):
        self.engine = engine
        self.budget_bytes = int(budget_mb * 2**20)
        self.current: str | None = None
        self.saved: OrderedDict[str, Snapshot] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    @property
    def saved_bytes(self) -> int:
        with self._lock:
            snapshots = list(self.saved.values())
        return sum(snapshot.size_bytes for snapshot in snapshots)

    def forget(self, document: str) -> None:
        with self._lock:
            self.saved.pop(document, None)

    def clear(self) -> None:
        with self._lock:
            self.saved.clear()
        self.current = None

    def activate(self, document: str) -> None:
        """Make `document`'s caches the live ones."""
        if document == self.current:
            return
        with self._lock:
            snapshot = self.saved.pop(document, None)  # taken first: saving must not evict it
        if self.current is not None:
            leaving = Snapshot([sequence.save() for sequence in self.engine.sequences])
            with self._lock:
                self.saved[self.current] = leaving
                while self.saved and sum(saved.size_bytes for saved in self.saved.values()) > self.budget_bytes:
                    self.saved.popitem(last=False)
        for index, sequence in enumerate(self.engine.sequences):
            if snapshot is not None:
                sequence.restore(snapshot.sequences[index])
            else:
                sequence.truncate(0)
        self.current = document


@dataclass
class ForwardCache:
    """The completion last shown in a document. When the user types what it starts
    with, the rest of the model's text is the answer, with no model call. It is also
    the better answer: the model wrote it whole, not from a prompt cut inside one of
    its tokens. The rest is post-processed again for the cursor as it is now: typing
    can move it mid-line (an editor auto-closing a bracket), where one line is shown,
    without what already follows the cursor."""

    text_before: str = ""  # the document's text before the cursor when it was shown
    generated: str = ""  # the model's text, before post-processing
    shown: str = ""  # what post-processing made of it then
    timed_out: bool = False  # the generation ran out of time: its last line is half-written

    def remember(self, text_before: str, generated: str, shown: str, timed_out: bool = False) -> None:
        self.text_before, self.generated, self.shown, self.timed_out = text_before, generated, shown, timed_out

    def lookup(self, text_before: str, cursor: CursorContext) -> str | None:
        """What post-processing shows at `cursor` of the model's text after what the user
        typed, if the text before the cursor is the old one plus a start of the shown
        completion; None otherwise, or when that leaves nothing to show."""
        if not self.shown or not text_before.startswith(self.text_before):
            return None
        typed = text_before[len(self.text_before) :]
        if not self.shown.startswith(typed) or typed == self.shown:
            return None
        return postprocess(self.generated[len(typed) :], cursor, timed_out=self.timed_out) or None


class PositionError(ValueError):
    """A cursor outside the document."""


@dataclass(frozen=True)
class CompletionRequest:
    document: str  # the editor's name for it: a URI or a path
    path: str  # its file path, for the prompt's header and the workspace check
    text: str
    cursor: int  # an offset into `text`, in characters (code points)
    language: str = ""


@dataclass
class Completion:
    text: str  # to insert at the cursor
    # "model", "forward cache", "superseded" (a newer request took over: show nothing), or
    # "no room" (no prompt fits the context: `warning` says which options to change)
    source: str
    stop_reason: str = ""
    prompt: list[int] | str = field(default_factory=list)  # as rendered, before token healing (text for openai)
    evaluated_tokens: int = 0  # prompt tokens the target's cache lacked
    generation: Generation | None = None  # the local engine's
    remote: RemoteGeneration | None = None  # a server's, with its own timings
    # What the user should hear of once (the server says when it changes): why the draft
    # model was dropped, why the server cannot be used now, or why no prompt fits; "" while
    # all is well.
    warning: str = ""

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt)


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
    warmed_tokens: int = 0
    index_files: int = 0
    index_tokens: int = 0
    index_mb: float = 0.0


@dataclass
class Counters:
    """Since the completer started, for `completer/stats`."""

    requests: int = 0
    forward_cache_hits: int = 0
    superseded: int = 0
    prompt_tokens: int = 0
    evaluated_tokens: int = 0
    generated_tokens: int = 0
    generation_ms: float = 0.0
    drafted: int = 0
    accepted: int = 0
    warmed_tokens: int = 0  # prompt tokens evaluated ahead of a request (Completer.warm)

    def add_remote(self, generation: RemoteGeneration) -> None:
        """A server's own counts, from the timings a finished stream ends with: prompt
        tokens it evaluated, what it generated and in how long, drafted and accepted."""
        timings = generation.timings
        self.evaluated_tokens += int(timings.get("prompt_n", 0))
        self.generated_tokens += int(timings.get("predicted_n", 0))
        self.generation_ms += float(timings.get("predicted_ms", 0.0)) + float(timings.get("prompt_ms", 0.0))
        self.drafted += int(timings.get("draft_n", 0))
        self.accepted += int(timings.get("draft_n_accepted", 0))

    def stats(self, **state) -> CompleterStats:
        """The counters as statistics, beside the completer's `state` (CompleterStats fields)."""
        return CompleterStats(
            requests=self.requests,
            forward_cache_hits=self.forward_cache_hits,
            superseded=self.superseded,
            cache_hit_rate=1 - self.evaluated_tokens / self.prompt_tokens if self.prompt_tokens else 0.0,
            draft_acceptance_rate=self.accepted / self.drafted if self.drafted else 0.0,
            tokens_per_second=self.generated_tokens / self.generation_ms * 1000 if self.generation_ms else 0.0,
            warmed_tokens=self.warmed_tokens,
            **state,
        )

    def add(self, generation: Generation) -> None:
        stats = generation.stats
        self.generated_tokens += stats.tokens
        self.generation_ms += stats.total_ms
        self.drafted += stats.drafted
        self.accepted += stats.accepted


@dataclass
class CompletionSession:
    """What a document keeps between requests."""

    path: str
    forward: ForwardCache = field(default_factory=ForwardCache)
    text: str = ""  # the text of its last request
    cursor: int = 0  # the cursor of its last request: where its context chunk is taken


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


def counted(tokens: list[int]) -> tuple[list[int], int]:
    """Token ids as fit_prompt's `encode` gives them: the prompt, and its length."""
    return tokens, len(tokens)


class PromptTooLong(ValueError):
    """Not even the smallest prompt (the file's path and the format's tokens, with no
    text around the cursor) fits the room left for it: no completion can be made."""

    def __init__(self, smallest: int, room: int):
        super().__init__(f"the smallest prompt takes {smallest} tokens and {max(room, 0)} are left for it")
        self.smallest, self.room = smallest, room


def fit_prompt(request: CompletionRequest, options: PromptOptions, template: FimTemplate | None, room: int,
               workspace: Workspace, ring: ChunkRing, encode: Callable[[list[Segment]], tuple[P, int]]
               ) -> tuple[P, int, str]:
    """The prompt as `encode` makes it of the rendered segments (token ids, or the text a
    server tokenizes), its length in tokens, and the suffix the cursor sees. Context
    chunks, then prefix lines, then the characters around the cursor give way until it
    fits in `room` tokens; PromptTooLong when nothing is left to give. At most
    chunks + log2(lines) + log2(characters) + 3 encodings, whatever `room` is."""
    path = workspace.relative(request.path) if workspace.contains(request.path) else request.path
    context = ring.select(options.context_tokens, exclude=path)
    repo = workspace.roots[0].name if workspace.roots else ""
    # Halving from more lines than there are would only encode the same prompt again.
    prefix_lines = min(options.prefix_lines, request.text.count("\n", 0, request.cursor))
    keep_chars = None
    while True:
        prefix, suffix = cursor_sections(request.text, request.cursor, prefix_lines, options.suffix_lines)
        if keep_chars is not None:  # one huge line (minified code): keep what is nearest the cursor
            prefix, suffix = prefix[max(0, len(prefix) - keep_chars):], suffix[:keep_chars]
        prompt, length = encode(render(template, path, prefix, suffix if template else "", context, repo))
        if length <= room:
            return prompt, length, suffix
        if context:
            context = context[1:]  # the oldest chunk first
        elif prefix_lines:
            prefix_lines //= 2
        elif prefix or suffix:
            keep_chars = max(len(prefix), len(suffix)) // 2
        else:
            raise PromptTooLong(length, room)


def no_room(error: PromptTooLong, context: str, max_tokens: int) -> Completion:
    """The empty answer when no prompt fits, saying why and what to change: `context`
    names where the tokens are counted (models.context_tokens, or a server's slot)."""
    return Completion("", "no room", "prompt too long", warning=(
        f"no completion: {error}: {context} less generation.max_tokens {max_tokens}. Lower "
        "generation.max_tokens or give the model a larger context"))


class Completer:
    """Completions for every document, from one engine; the newest request for a
    document wins. Thread-safe: the language server calls it from worker threads."""

    def __init__(self, engine: Engine, config: Config | None = None, workspace: Workspace | None = None):
        self.engine = engine
        self.workspace = workspace or Workspace([])
        self.template = template_for(engine.model)
        self.prefixes = TokenPrefixes(engine.model, engine.model.n_vocab)
        self.caches = DocumentCaches(engine, 0)
        self.ring = ChunkRing(self.workspace, lambda text: len(engine.model.tokenize(text)))
        self.index = WorkspaceIndex()
        self._index_cancel = threading.Event()  # the index build's under way
        self.sessions: dict[str, CompletionSession] = {}
        self.counters = Counters()
        self._state = threading.Lock()  # sessions, running requests, counters, options to apply
        # One generation at a time; the engine's state, the caches, the ring and the
        # options in use change only under it.
        self._engine_lock = threading.Lock()
        self._new_config: Config | None = None  # options configure() got, applied when the engine is free
        self._running: dict[str, threading.Event] = {}  # document -> its newest request's cancel flag
        # Requests waiting for the engine: warming yields to them between its pieces.
        self._waiting = 0
        self._no_request_waiting = threading.Condition(self._state)
        self._warm_generation = 0  # a newer warm() stops an older one
        self._apply(config or Config())

    def cancel(self, document: str) -> None:
        """Stop the document's running generation at its next round."""
        with self._state:
            if document in self._running:
                self._running[document].set()

    def close(self, document: str) -> None:
        """The editor closed the document: its session, saved caches and text go; n-gram
        lookup drafts from the file as last saved again."""
        self.cancel(document)
        with self._engine(), self._state:
            session = self.sessions.pop(document, None)
            self.caches.forget(document)
            self.engine.ngram.remove_other_document(document)
            if session is not None and session.path not in self.engine.ngram.saved_files:
                self.index.show(session.path)

    def saved(self, path: str, text: str) -> None:
        """The editor saved a workspace file: n-gram lookup drafts from this text of it
        from now on, not the index's older copy."""
        if not self.workspace.contains(path):
            return
        tokens = self.engine.model.tokenize(text)
        with self._engine():
            self.index.hide(path)
            self.engine.ngram.set_saved_file(path, tokens)

    def configure(self, config: Config) -> None:
        """New options: they apply from the next request on (the models stay); a new
        index size from the next index_workspace(). The language server calls this on its
        event loop, which must not wait for a generation: when the engine is busy, the
        options wait for whoever takes it next (`_engine`)."""
        with self._state:
            self._new_config = config
        if self._engine_lock.acquire(blocking=False):
            try:
                self._apply_new_config()
            finally:
                self._engine_lock.release()

    @contextmanager
    def _engine(self):
        """The engine lock, with the newest options applied first: a request, warming and
        every other change of the engine's state take the engine through this."""
        with self._engine_lock:
            self._apply_new_config()
            yield

    def _apply_new_config(self) -> None:
        """Under the engine lock: the options configure() got, if any."""
        with self._state:
            config, self._new_config = self._new_config, None
        if config is not None:
            self._apply(config)

    def _apply(self, config: Config) -> None:
        """Under the engine lock (or before any other thread has the Completer)."""
        self.config = config
        self.engine.configure(config.drafting)
        self.index.options = config.drafting
        self.engine.ngram.workspace = self.index if config.drafting.index_mb > 0 else None
        self.caches.budget_bytes = int(config.cache.budget_mb * 2**20)
        self.ring.capacity, self.ring.chunk_lines = config.prompt.chunks, config.prompt.chunk_lines

    def index_workspace(self) -> threading.Thread | None:
        """Build the workspace index for n-gram lookup in a background thread (requests are
        served meanwhile, drafting from open documents); None when there is nothing to
        index or drafting.index_mb is 0."""
        if not self.workspace.roots or self.config.drafting.index_mb <= 0:
            return None
        saved = saved_index_path(self.engine.model.path, self.workspace.roots)
        self.stop_indexing()
        cancel = self._index_cancel = threading.Event()
        thread = threading.Thread(target=self.index.build, args=(self.workspace, self.engine.model.tokenize),
                                  kwargs={"cancel": cancel, "saved": saved}, name="completer-index", daemon=True)
        thread.start()
        return thread

    def stop_indexing(self) -> None:
        """End the index build under way at its next file: after a reload, a build nobody
        waits for would hold the old model's tokenizer, and so its weights, until done."""
        self._index_cancel.set()

    def warm(self, request: CompletionRequest) -> int:
        """Evaluate the prompt a request at this cursor would have, before it is asked (a
        document opened or made active, the user reading before typing), as llama.vim
        pre-sends its prompt with n_predict 0. It goes WARM_PIECE tokens at a time and
        yields the engine to any completion request between pieces; after one it goes
        on only if that request was for this document (the caches are still its), and
        a newer warm() stops it. Returns the prompt tokens it evaluated."""
        with self._state:
            self._warm_generation += 1
            generation = self._warm_generation
        if not 0 <= request.cursor <= len(request.text):
            raise PositionError(f"offset {request.cursor} is outside the document ({len(request.text)} characters)")
        warmed, first = 0, True
        while True:
            with self._state:
                while self._waiting:
                    self._no_request_waiting.wait()
            with self._engine():
                if generation != self._warm_generation:
                    break
                if self._waiting:
                    continue  # a request came between: it goes first
                if first:
                    with self._state:
                        session = self.sessions.setdefault(request.document, CompletionSession(request.path))
                    self._switch_to(request.document)
                    session.text, session.cursor = request.text, request.cursor
                    try:
                        prompt = self.prompt(request)[0]  # all but its last token is evaluated, as generate does
                    except PromptTooLong:
                        break  # the request will say so
                    first = False
                elif self.caches.current != request.document:
                    break  # a request for another document took the caches: the user is there now
                have = self.engine.cached_length(prompt)
                if have >= len(prompt) - 1:
                    break
                self.engine.prefill(prompt[: have + WARM_PIECE + 1])
                if self.engine.cached_length(prompt) <= have:
                    break  # nothing went in (a failed evaluation, logged): leave it to the request
                warmed += self.engine.cached_length(prompt) - have
        with self._state:
            self.counters.warmed_tokens += warmed
        return warmed

    def begin(self, document: str) -> threading.Event:
        """The cancel flag of a new request for `document`; older requests for it are
        cancelled (the newest request wins)."""
        with self._state:
            if document in self._running:
                self._running[document].set()
            cancel = self._running[document] = threading.Event()
        return cancel

    def complete(self, request: CompletionRequest, cancel: threading.Event | None = None) -> Completion:
        """The completion at the request's cursor. `cancel` (from begin(), made here when
        not given) stops the generation at its next round; the result is then empty."""
        completion = self._complete(request, cancel)
        completion.warning = completion.warning or self.engine.draft_failure
        return completion

    def stats(self) -> CompleterStats:
        with self._state:
            return self.counters.stats(
                draft_failure=self.engine.draft_failure,
                sessions=len(self.sessions),
                saved_kv_mb=self.caches.saved_bytes / 2**20,
                index_files=self.index.stats.files,
                index_tokens=self.index.stats.tokens,
                index_mb=self.index.stats.mb,
            )

    def reset(self) -> None:
        """Forget every document: sessions, forward caches and KV caches, as if just loaded."""
        with self._engine(), self._state:
            self.sessions.clear()
            self.caches.clear()
            self.engine.reset()
            self.engine.ngram.others.clear()

    def _complete(self, request: CompletionRequest, cancel: threading.Event | None) -> Completion:
        if not 0 <= request.cursor <= len(request.text):
            raise PositionError(f"offset {request.cursor} is outside the document ({len(request.text)} characters)")
        text_before = request.text[: request.cursor]
        cursor = self.cursor_context(request)
        cancel = cancel or self.begin(request.document)
        try:
            with self._state:
                self.counters.requests += 1
                session = self.sessions.setdefault(request.document, CompletionSession(request.path))
                rest = session.forward.lookup(text_before, cursor)
                if rest is not None:
                    self.counters.forward_cache_hits += 1
                    return Completion(rest, "forward cache")
            with self._engine_for_request():
                if cancel.is_set():
                    return self._superseded()
                completion = self._generate(request, session, text_before, cursor.line_before, cancel)
            if completion.source == "superseded":
                return self._superseded()
            return completion
        finally:
            with self._state:
                if self._running.get(request.document) is cancel:
                    del self._running[request.document]

    @contextmanager
    def _engine_for_request(self):
        """The engine, for a request: warming does not take it while a request waits
        (a plain lock would let warming take it back between its pieces)."""
        with self._state:
            self._waiting += 1
        try:
            self._engine_lock.acquire()
        finally:
            with self._state:
                self._waiting -= 1
                if not self._waiting:
                    self._no_request_waiting.notify_all()
        try:
            self._apply_new_config()
            yield
        finally:
            self._engine_lock.release()

    def _superseded(self) -> Completion:
        with self._state:
            self.counters.superseded += 1
        return Completion("", "superseded", "cancelled")

    def _switch_to(self, document: str) -> None:
        """Make the document's caches live; the one left becomes a context chunk and, when
        inside the workspace, text n-gram lookup drafts from."""
        left_document = self.caches.current
        left = self.sessions.get(left_document) if left_document is not None else None
        if left is not None and left_document != document and left.text:
            self.ring.add(left.path, left.text, left.cursor)
            if self.workspace.contains(left.path):
                self.engine.ngram.set_other_document(left_document, self.engine.model.tokenize(left.text))
        self.engine.ngram.remove_other_document(document)  # it is the document now
        session = self.sessions.get(document)
        if session is not None and self.workspace.contains(session.path):
            self.index.hide(session.path)  # the editor's text is newer than the index's copy
        self.caches.activate(document)

    def cursor_context(self, request: CompletionRequest) -> CursorContext:
        """The cursor as post-processing sees it, with the suffix the prompt would take."""
        line_before, suffix = cursor_sections(request.text, request.cursor, 0, self.config.prompt.suffix_lines)
        return CursorContext(line_before, suffix)

    def prompt(self, request: CompletionRequest) -> tuple[list[int], str]:
        """The prompt's tokens, and the suffix the cursor sees; PromptTooLong when none
        fits in the engine's context beside the answer."""
        room = self.engine.context_tokens - self.config.generation.max_tokens - 1
        tokens, _, suffix = fit_prompt(request, self.config.prompt, self.template, room, self.workspace, self.ring,
                                       lambda segments: counted(tokenize_segments(self.engine.model, segments)))
        return tokens, suffix

    def _generate(self, request: CompletionRequest, session: CompletionSession, text_before: str,
                  line_before: str, cancel: threading.Event) -> Completion:
        self._switch_to(request.document)
        session.text, session.cursor = request.text, request.cursor
        try:
            prompt, suffix = self.prompt(request)
        except PromptTooLong as error:
            return no_room(error, f"models.context_tokens {self.engine.context_tokens}",
                           self.config.generation.max_tokens)
        evaluated = len(prompt) - self.engine.cached_length(prompt)
        healed_prompt, healing = heal(prompt, self.engine.model, self.prefixes) if self.config.prompt.heal \
            else (prompt, None)
        cursor = CursorContext(line_before, suffix)
        generation_options = self.config.generation
        result = generate(
            self.engine, healed_prompt, generation_options.max_tokens, stop=stops_for(cursor),
            time_budget_ms=generation_options.time_budget_ms or None,
            sampling=Sampling(generation_options.temperature, generation_options.top_k, generation_options.top_p),
            mode=generation_options.draft_mode,
            cancel=cancel, document=request.document, language=request.language,
            done=lambda text: cut_to_scope(text, cursor) != text, healing=healing,
        )
        if result.stop_reason == "cancelled":
            return Completion("", "superseded", "cancelled")
        timed_out = result.stop_reason == "time"
        shown = postprocess(result.text, cursor, timed_out=timed_out)
        with self._state:
            session.forward.remember(text_before, result.text, shown, timed_out)
            self.counters.prompt_tokens += len(prompt)
            self.counters.evaluated_tokens += evaluated
            self.counters.add(result)
        return Completion(shown, "model", result.stop_reason, prompt, evaluated, result)

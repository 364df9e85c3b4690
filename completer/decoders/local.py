"""Decoding on this machine: one engine (the target, a draft, n-gram lookup over the
open documents and the workspace index) and a KV cache per document.

The engine serves one request at a time from its live caches. When the editor
switches to another document, the live caches are saved to memory (llama.cpp's
per-sequence state) and the other document's are put back, so returning to a
recently used document evaluates only what changed.
"""

import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from typing import NamedTuple

from completer.config import Config
from completer.decoders.decoder import (Closed, Decode, DecodeCounts, Decoded, DecodeRequest, DecoderModel,
                                        DocumentEvent, Prompt, Saved, ready, with_length)
from completer.engine.candidates import candidates
from completer.engine.drafts import NgramIndex
from completer.engine.generation import PROMPT_PIECE, Engine, GenerationRequest, generate
from completer.engine.healing import TokenPrefixes, heal
from completer.engine.workspace_index import WorkspaceIndex, saved_index_path
from completer.errors import Cancelled
from completer.prompt import Segment, template_for, tokenize_segments
from completer.requests import CancelFlag, StopReason
from completer.workspace import Workspace


class SavedIndex(NamedTuple):
    """A Saved event with its text indexed for n-gram lookup, ready for the engine."""

    path: str
    index: NgramIndex


class LocalDecoder:
    """The engine as a Decoder. One request or piece of warming has the engine at a time;
    requests go before warming (`turn`)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        model = engine.model
        self.model = DecoderModel(template_for(model), engine.context_tokens,
                                  f"models.context_tokens {engine.context_tokens}", encode=self.encode,
                                  count=lambda text: len(model.tokenize(text)),
                                  text_of=lambda prompt: model.detokenize(prompt, special=True))
        self.prefixes = TokenPrefixes(engine.model, engine.model.n_vocab)
        self.index = WorkspaceIndex()
        self._index_cancel = threading.Event()  # the index build's under way
        self._state = threading.Lock()  # what waits for the engine, the count of requests waiting
        # One generation at a time; the engine's state (the documents' caches among it) and
        # the options in use change only under it.
        self._engine_lock = threading.Lock()
        # What configure() and document_event() got while the engine was busy: done by whoever
        # has the engine, before it uses it and before it lets it go.
        self._new_config: Config | None = None
        self._events: list[SavedIndex | Closed] = []
        self._waiting = 0  # requests waiting for the engine: warming yields to them between its pieces
        self._no_request_waiting = threading.Condition(self._state)
        self._warm_generation = 0  # a newer warm() stops an older one
        self._apply(Config())

    @property
    def warning(self) -> str:
        return self.engine.draft_failure

    def connect(self) -> DecoderModel:
        return self.model

    def configure(self, config: Config) -> None:
        """The language server calls this on its event loop, which must not wait for a
        generation: when the engine is busy, the options wait for whoever has it."""
        with self._state:
            self._new_config = config
        self._if_free()

    def _if_free(self) -> None:
        """What waits for the engine done now, if no one has the engine (else that one does it)."""
        if self._engine_lock.acquire(blocking=False):
            self._let_go()

    def _do_what_waits(self) -> None:
        """Under the engine lock: the options configure() got and the events document_event() got, if any."""
        with self._state:
            config, self._new_config = self._new_config, None
            events, self._events = self._events, []
        if config is not None:
            self._apply(config)
        for event in events:
            self._follow(event)

    def _let_go(self) -> None:
        """Release the engine lock, what waits for the engine done first. What comes while
        it is let go is done here when no one took the engine meanwhile, else by that one:
        nothing waits for a next user."""
        while True:
            try:
                self._do_what_waits()
            finally:
                self._engine_lock.release()
            with self._state:
                if self._new_config is None and not self._events:
                    return
            if not self._engine_lock.acquire(blocking=False):
                return

    def _apply(self, config: Config) -> None:
        """Under the engine lock (or before any other thread has the decoder)."""
        self.config = config
        self.engine.configure(config.drafting, config.cache)
        self.index.options = config.drafting
        self.engine.use_index(self.index if config.drafting.index_mb > 0 else None)

    @contextmanager
    def _engine(self):
        """The engine, with the newest options and document events applied first: warming and every
        other change of the engine's state take it through this."""
        self._engine_lock.acquire()
        try:
            self._do_what_waits()
            yield
        finally:
            self._let_go()

    @contextmanager
    def turn(self):
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
            self._do_what_waits()
            yield
        finally:
            self._let_go()

    def enter(self, document: str, path_in_workspace: str | None, left: tuple[str, str] | None,
              cancel: CancelFlag | None, edits: bool = False) -> None:
        """Make the document's caches live (its next edits' own, for `edits`); n-gram lookup
        drafts from the workspace document left, and no longer from this one's older copies."""
        if path_in_workspace is not None:
            self.index.hide(path_in_workspace)  # the editor's text is newer than the index's copy
        self.engine.enter(document, left, edits)

    def encode(self, segments: list[Segment], cancel: CancelFlag | None = None) -> tuple[list[int], int]:
        model = self.engine.model
        bos = [model.special.bos] if model.adds_bos else []
        return with_length(bos + tokenize_segments(model, segments))

    def decode(self, request: DecodeRequest) -> Decoded:
        """Under the engine's turn: the request's prompt made, the document's caches entered, decoded."""
        with self.turn():
            if request.cancel.is_set():
                raise Cancelled
            prompt = self._entered(request)
            return replace(self.decode_prompt(ready(request, prompt)), prompt=prompt)

    def _entered(self, request: DecodeRequest) -> Prompt:
        """Under the engine: the request's prompt, and its document's caches made live."""
        prompt = request.prompt(self.model, self.model.context_tokens - request.answer_tokens)
        self.enter(request.document, prompt.in_workspace, prompt.left, request.cancel, request.edits)
        return prompt

    def decode_prompt(self, decode: Decode) -> Decoded:
        """A prompt already made decoded, in the caches made live (enter)."""
        prompt = decode.prompt
        evaluated = len(prompt) - self.engine.cached_length(prompt)
        healed_prompt, healing = heal(prompt, self.engine.model, self.prefixes) if decode.heal else (prompt, None)
        started = time.perf_counter()
        # Candidates fork the target's sequence, which recurrent state cannot do (candidates()).
        several = decode.candidates > 1 and self.engine.offers_candidates
        request = GenerationRequest(
            prompt=healed_prompt, max_tokens=decode.max_tokens, stop=tuple(decode.stop),
            time_budget_ms=decode.time_budget_ms or None, sampling=decode.sampling, mode=decode.draft_mode,
            cancel=decode.cancel, document=decode.document, language=decode.language, done=decode.done,
            healing=healing, keep_logits=several,
            copy_from=self.engine.model.tokenize(decode.copy_from) if decode.copy_from else None)
        result = generate(self.engine, request)
        stats = result.stats
        counts = DecodeCounts(len(prompt), evaluated + stats.rewound, stats.tokens, stats.total_ms, stats.drafted,
                              stats.accepted)
        alternatives = ()
        if several and result.stop_reason != StopReason.CANCELLED:
            # The time budget counts from the request's decoding: the others stop with the answer's.
            deadline = started + decode.time_budget_ms / 1000 if decode.time_budget_ms else None
            alternatives = tuple((c.text, c.stop_reason)
                                 for c in candidates(self.engine, request, result, decode.candidates - 1, deadline))
        return Decoded(result.text, result.stop_reason, counts, result, alternatives)

    def warm(self, request: DecodeRequest) -> int:
        """warm_prompt() of the request's prompt, made (and its document entered) once warming has the engine."""
        return self.warm_prompt(request.document, lambda: self._entered(request).tokens)

    def warm_prompt(self, document: str, prompt_for: Callable[[], list[int]]) -> int:
        """PROMPT_PIECE tokens at a time, as a request evaluates its prompt, yielding the
        engine to any request between pieces (which then waits for one piece at most);
        after one it goes on only if that request was for this document (the caches are
        still its), and a newer warm() stops it."""
        with self._state:
            self._warm_generation += 1
            generation = self._warm_generation
        warmed, prompt = 0, None
        while True:
            with self._state:
                while self._waiting:
                    self._no_request_waiting.wait()
            with self._engine():
                if generation != self._warm_generation:
                    break
                if self._waiting:
                    continue  # a request came between: it goes first
                if prompt is None:
                    prompt = prompt_for()  # all but its last token is evaluated, as generate does
                elif not self.engine.holds(document):
                    break  # a request for another document took the caches: the user is there now
                have = self.engine.cached_length(prompt)
                if have >= len(prompt) - 1:
                    break
                self.engine.prefill(prompt, have + PROMPT_PIECE)
                if self.engine.cached_length(prompt) <= have:
                    break  # nothing went in (a failed evaluation, logged): leave it to the request
                warmed += self.engine.cached_length(prompt) - have
        return warmed

    def document_event(self, event: DocumentEvent) -> None:
        """Never waits: with the engine busy, whoever has it applies the event before it lets
        it go, so before any later request (a reopened document's included) uses it. A saved
        file is tokenized and indexed here first, so no one holds the engine for that."""
        if isinstance(event, Saved):
            event = SavedIndex(event.path, self.engine.saved_file_index(event.text))
        with self._state:
            self._events.append(event)
        self._if_free()

    def _follow(self, event: SavedIndex | Closed) -> None:
        """Under the engine lock. Closed: its caches, curves and last request's leavings go; lookup
        drafts from the file as last saved. Saved: lookup drafts from this text, not the index's copy
        (while the saved files' share of drafting.index_mb holds it)."""
        if isinstance(event, Closed):
            self.engine.forget(event.document)
            if event.path is not None and not self.engine.has_saved_file(event.path):
                self.index.show(event.path)
        else:
            self.index.hide(event.path)
            self.engine.set_saved_file(event.path, event.index)

    def reset(self) -> None:
        with self._engine():
            self.engine.reset()

    def index_workspace(self, workspace: Workspace) -> threading.Thread | None:
        """Build the workspace index for n-gram lookup in a background thread (requests are
        served meanwhile, drafting from open documents); None when there is nothing to
        index or drafting.index_mb is 0."""
        if not workspace.roots or self.config.drafting.index_mb <= 0:
            return None
        saved = saved_index_path(self.engine.model.path, workspace.roots)
        self.stop_indexing()
        cancel = self._index_cancel = threading.Event()
        exclude = self.config.context.exclude_patterns  # never opened, let alone tokenized
        thread = threading.Thread(target=self.index.build, args=(workspace, self.engine.model.tokenize),
                                  kwargs={"cancel": cancel, "saved": saved, "exclude": exclude},
                                  name="completer-index", daemon=True)
        thread.start()
        return thread

    def stop_indexing(self) -> None:
        """End the index build under way at its next file: after a reload, a build nobody
        waits for would hold the old model's tokenizer, and so its weights, until done."""
        self._index_cancel.set()

    def statistics(self) -> dict:
        stats, documents = self.index.stats, self.engine.document_statistics()
        return {"draft_failure": self.engine.draft_failure, "saved_kv_mb": documents["saved_kv_mb"],
                "drafting_documents": documents["drafting_documents"],
                "tuned_documents": documents["tuned_documents"],
                "index_files": stats.files, "index_tokens": stats.tokens,
                "index_mb": stats.mb + documents["saved_files_mb"]}

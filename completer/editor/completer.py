"""Completions for documents being edited, the same for every backend: documents,
prompts, the forward cache (forward_cache.py), newest-request-wins (running.py), the
prefetch (prefetch.py), post-processing and statistics, over one Decoder
(decoders.local.LocalDecoder: this machine's engine; decoders.server.ServerDecoder:
llama-server or an OpenAI-compatible server).

    request (document text, cursor)
      -> forward cache: the user typed the start of what is shown? its rest, no decoding
      -> prefetch: the user accepted what is shown, and its follow-up was computed while
         it was on screen? that, no decoding (waited for while still being computed);
         any other request stops the prefetch
      -> newest request wins: an older one for the document is cancelled (its generation
         stops at its next round, its stream is closed)
      -> the decoder: connected, or an empty answer saying why (a server down)
      -> under the decoder's turn: the document entered (the one left becomes a context
         chunk), the prompt (other files' chunks, path, prefix [, suffix], stablest first)
         fitted to the decoder's context, decoded (a prompt a server finds too long is
         tried once more at half the length)
      -> post-process, remember for the forward cache, count

    next-edit request (document text, cursor): the same newest-wins, decoder and turn;
      the editable region around the cursor, the recent edits across documents and the
      text around it, in the model family's format (completer.editor.next_edit), fitted to the
      context; the region written again (the decoder copy-drafts from it), and the
      answer is the edits between the two
"""

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from completer.config import Config, PromptOptions
from completer.decoders.protocol import Decode, DecodeCounts, Decoded, Decoder, DecoderModel
from completer.editor.context import ChunkRing
from completer.editor.forward_cache import ForwardCache, Shown, distinct
from completer.editor.next_edit import (FORMATS, EditHistory, edits_between, engine_stops, fit_edit_prompt, recent,
                                        rewrite_end, suggested_rewrite)
from completer.editor.postprocess import CursorContext, cut_to_scope, postprocess, stops_for
from completer.editor.prefetch import Prefetch, PrefetchSlot
from completer.editor.running import RunningRequests, stopped_by_close
from completer.engine.speculative import Sampling
from completer.errors import Cancelled, PromptTooLong, Refused, Unavailable
from completer.models.presets import PRESETS
from completer.prompt import FimTemplate, Segment, cursor_sections, render
from completer.requests import (EDITS, CancelFlag, CompleterStats, Completion, CompletionRequest, NextEdit, Source,
                                StopReason)
from completer.workspace import Workspace

log = logging.getLogger(__name__)

P = TypeVar("P")  # a prompt as a decoder takes it
A = TypeVar("A")  # an answer: a Completion or a NextEdit


@dataclass
class CompletionSession:
    """What a document keeps between requests."""

    path: str
    forward: ForwardCache = field(default_factory=ForwardCache)
    text: str = ""  # the text of its last request
    cursor: int = 0  # the cursor of its last request: where its context chunk is taken


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
    edit_requests: int = 0
    edits_suggested: int = 0
    prefetches: int = 0  # completions computed ahead of an acceptance (Completer.prefetch)
    prefetch_hits: int = 0  # requests answered from one

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
            edit_requests=self.edit_requests,
            edits_suggested=self.edits_suggested,
            prefetches=self.prefetches,
            prefetch_hits=self.prefetch_hits,
            **state,
        )

    def add(self, counts: DecodeCounts) -> None:
        self.prompt_tokens += counts.prompt_tokens
        self.evaluated_tokens += counts.evaluated_tokens
        self.generated_tokens += counts.generated_tokens
        self.generation_ms += counts.generation_ms
        self.drafted += counts.drafted
        self.accepted += counts.accepted


def fit_prompt(request: CompletionRequest, options: PromptOptions, template: FimTemplate | None, room: int,
               workspace: Workspace, ring: ChunkRing, encode: Callable[[list[Segment]], tuple[P, int]]
               ) -> tuple[P, int, str]:
    """The prompt as `encode` makes it of the rendered segments (token ids, or the text a
    server tokenizes), its length in tokens, and the suffix the cursor sees. Context
    chunks, then prefix lines, then the characters around the cursor give way until it
    fits in `room` tokens; PromptTooLong when nothing is left to give. At most
    chunks + log2(lines) + log2(characters) + 3 encodings, whatever `room` is."""
    path = workspace.relative(request.path) if workspace.contains(request.path) else request.path
    context = ring.select(options.cross_file_tokens, exclude=path)
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


def edit_format_name(config: Config) -> str:
    """edits.format, with `auto` the preset's format (a target of one's own: `instruction`)."""
    if config.edits.format != "auto":
        return config.edits.format
    if config.models.target is not None or config.models.preset not in PRESETS:
        return "instruction"
    return PRESETS[config.models.preset].edit_format


# How often a request served by a prefetch still being computed looks at its own cancel flag.
PREFETCH_POLL_S = 0.005


class Completer:
    """Completions for every document, from one decoder; the newest request for a
    document wins. Thread-safe: the language server calls it from worker threads."""

    def __init__(self, decoder: Decoder, config: Config | None = None, workspace: Workspace | None = None):
        self.decoder = decoder
        self.workspace = workspace or Workspace([])
        self.ring = ChunkRing(self.workspace, decoder.count)
        self.sessions: dict[str, CompletionSession] = {}
        self.counters = Counters()
        self.current: str | None = None  # the document last entered: the one the user is in
        self._state = threading.Lock()  # sessions, the current document, counters
        self.running = RunningRequests()  # by document (EDITS + document: its next edits)
        self.warming = RunningRequests()  # by document: warm() under way, which close() stops
        self.prefetches = PrefetchSlot()
        self.history = EditHistory()  # the user's recent edits, for next-edit prompts
        self.configure(config or Config())

    def configure(self, config: Config) -> None:
        """New options: each request takes the options in force when it starts (the
        models stay); a new index size applies from the next index_workspace()."""
        self.config = config
        self.prefetches.drop(lambda ahead: True)  # computed under the old options
        self.ring.resize(config.prompt.chunks, config.prompt.chunk_lines)
        self.decoder.configure(config)

    def new_request_flag(self, document: str) -> CancelFlag:
        """The cancel flag of a new request for `document`; older requests for it are
        cancelled (the newest request wins)."""
        return self.running.start(document)

    def new_warm_flag(self, document: str) -> CancelFlag:
        """The cancel flag of a new warm() of `document`, which close() sets."""
        return self.warming.start(document)

    def close(self, document: str) -> None:
        """The editor closed the document: its requests stop, its session and edit history
        go, and so do the decoder's caches of it. Never waits, so the server runs it on its
        event loop, in the order of the editor's messages: a request or a reopen after the
        close finds the document closed, and the decoder releases the caches before anyone
        uses its engine again (never after a reopened document's request filled them).
        Work that starts after this for a request made before it stops by the flag the
        request carries (CompletionRequest.closed, which the language server sets)."""
        self.running.cancel(document)
        self.running.cancel(EDITS + document)
        self.warming.cancel(document)
        self.prefetches.drop(lambda ahead: ahead.request.document == document)
        with self._state:
            self.history.forget(document)
            session = self.sessions.pop(document, None)
            if self.current == document:
                self.current = None
        self.decoder.close(document, session.path if session is not None else None)

    def forget_shown(self, document: str) -> None:
        """Forget the completion last shown in the document: the next request decodes."""
        with self._state:
            if document in self.sessions:
                self.sessions[document].forward = ForwardCache()

    def file_saved(self, path: str, text: str) -> None:
        """The editor saved a file: inside the workspace, the decoder drafts from this text of it."""
        if self.workspace.contains(path):
            self.decoder.file_saved(path, text)

    def index_workspace(self) -> threading.Thread | None:
        """Start the decoder's index of the workspace (drafting from its files), if it keeps one."""
        return self.decoder.index_workspace(self.workspace)

    def stop_indexing(self) -> None:
        self.decoder.stop_indexing()

    def reset(self) -> None:
        """Forget every document: sessions, forward caches and the decoder's caches, as if just loaded."""
        self.prefetches.drop(lambda ahead: True)
        with self._state:
            self.sessions.clear()
            self.current = None
        self.decoder.reset()

    def stats(self) -> CompleterStats:
        decoder_stats = self.decoder.statistics()
        with self._state:
            return self.counters.stats(sessions=len(self.sessions), **decoder_stats)

    def prompt_text(self, prompt: list[int] | str) -> str:
        """A completion's prompt as the model saw it, control tokens spelt out."""
        return self.decoder.prompt_text(prompt)

    def cursor_context(self, request: CompletionRequest, suffix: str | None = None) -> CursorContext:
        """The cursor as post-processing sees it, with the suffix the prompt would take."""
        line_before, around = cursor_sections(request.text, request.cursor, 0, self.config.prompt.suffix_lines)
        return CursorContext(line_before, around if suffix is None else suffix)

    def prompt(self, request: CompletionRequest, model: DecoderModel, cancel: CancelFlag | None = None,
               room: int | None = None) -> tuple[list[int] | str, int, str]:
        """The request's prompt in at most `room` tokens (by default the decoder's context
        less the answer's), its length and the suffix the cursor sees; PromptTooLong when
        none fits. Its calls to the decoder stop at `cancel` (Cancelled)."""
        if room is None:
            room = model.context_tokens - self.config.generation.max_tokens - 1
        return fit_prompt(request, self.config.prompt, model.template, room, self.workspace, self.ring,
                          lambda segments: self.decoder.encode(segments, cancel))

    def warm(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> int:
        """Evaluate the prompt a request at this cursor would have, before it is asked (a
        document opened or made active, the user reading before typing), as llama.vim
        pre-sends its prompt with n_predict 0; the prompt tokens evaluated. `cancel`:
        new_warm_flag()'s, taken where the editor's messages are read in order, so that
        a close read after it stops it."""
        request.check_cursor()
        model = self.decoder.connect()
        if model is None:
            return 0
        with self.warming.request(request.document, cancel) as cancel, stopped_by_close(request, cancel):
            def prompt_for() -> list[int] | str:
                # A warm that waited for the engine while the document closed brings no session back.
                self._enter(request, cancel)
                return self.prompt(request, model)[0]
            try:
                warmed = self.decoder.warm(request.document, prompt_for)
            except (Cancelled, PromptTooLong, Unavailable):
                return 0  # closed; or a request will say so
            except Refused as error:
                log.warning("%s (this request only: the server is up)", error)
                return 0
        with self._state:
            self.counters.warmed_tokens += warmed
        return warmed

    def prefetch(self, request: CompletionRequest, start: int) -> Completion | None:
        """Compute the completion at `request` now, for complete() to answer that request
        with: `request` is the document as accepting a shown completion (request.text[start
        : request.cursor]) leaves it. Only while no request is running: one the user waits
        for goes first, and any that comes stops it at its next round. The same prefetch
        already there is kept; another is replaced. Returns what it computed; None when it
        did not start."""
        request.check_cursor()
        if self.running or request.closed.is_set():
            return None
        ahead = self.prefetches.begin(request, start)
        if ahead is None:
            return None
        with self._state:
            self.counters.prefetches += 1
        try:
            with stopped_by_close(request, ahead.cancel):
                ahead.completion = self._in_turn(ahead.cancel, lambda model: self._complete_in_turn(
                    request, model, ahead.cancel, ahead), empty_completion)
        finally:
            ahead.done.set()
        return ahead.completion

    def document_changed(self, document: str, text: str) -> None:
        """The editor changed a document: a prefetch for it that the change does not lead to
        (the user typed something else than the shown completion) stops."""
        self.prefetches.drop(lambda ahead: ahead.request.document == document and not ahead.on_the_way(text))

    def complete(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> Completion:
        """The completion at the request's cursor. `cancel` (from new_request_flag(), made
        here when not given) stops it; the answer is then empty (Source.SUPERSEDED)."""
        request.check_cursor()
        with self.running.request(request.document, cancel) as cancel, stopped_by_close(request, cancel):
            completion = self._complete(request, cancel)
        if completion.source == Source.SUPERSEDED:
            with self._state:
                self.counters.superseded += 1
        completion.warning = completion.warning or self.decoder.warning
        return completion

    def next_edit(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> NextEdit:
        """The edits the user will make next in the editable region around the cursor: the
        model writes the region again (copy drafting from it where the decoder has it),
        and the answer is the difference. A newer next-edit request for the document
        cancels this one (new_request_flag(EDITS + document)); inline requests do not."""
        request.check_cursor()
        self.prefetches.drop(lambda ahead: not ahead.done.is_set())  # a running one would hold up this request
        with self.running.request(EDITS + request.document, cancel) as cancel, stopped_by_close(request, cancel):
            edit = self._in_turn(cancel, lambda model: self._next_edit(request, model, cancel), no_edit)
        with self._state:
            self.counters.edit_requests += 1
            self.counters.edits_suggested += bool(edit.edits)
            self.counters.superseded += edit.source == Source.SUPERSEDED
        edit.warning = edit.warning or self.decoder.warning
        return edit

    def _next_edit(self, request: CompletionRequest, model: DecoderModel, cancel: CancelFlag) -> NextEdit:
        self._enter(request, cancel, edits=True)
        options = self.config.edits
        edit_format = FORMATS[edit_format_name(self.config)]
        path = self.workspace_path(request.path)
        with self._state:
            events = recent(self.history.events, options.history_tokens)
        chunks = self.ring.select(options.cross_file_tokens, exclude=path)
        fitted = fit_edit_prompt(request.text, request.cursor, path,
                                 (options.lines_above, options.lines_below, options.context_lines), events,
                                 edit_format, model.context_tokens - 1, lambda text: self.decoder.count(text, cancel),
                                 chunks)
        if fitted is None:
            return no_edit(Source.NO_ROOM, StopReason.PROMPT_TOO_LONG, "no next edit: the cursor's line alone does "
                           f"not fit {model.context_name} with its rewrite")
        try:
            prompt, length = self.decoder.encode(list(fitted.prompt.segments), cancel)
        except ValueError as error:  # a format's control token that the model's vocabulary lacks
            return no_edit(Source.NO_ROOM, StopReason.PROMPT_TOO_LONG,
                           f"no next edit: {error}; edits.format {edit_format.family} is for another model's prompt")
        generation, ends, region = self.config.generation, fitted.prompt.ends, fitted.region.text
        decoded = self.decoder.decode(Decode(
            document=request.document, language=request.language, prompt=prompt, prompt_length=length,
            max_tokens=fitted.answer_tokens, draft_mode=generation.draft_mode,
            sampling=Sampling(generation.temperature, generation.top_k, generation.top_p),
            stop=engine_stops(ends, region),
            done=lambda text: rewrite_end(text, ends, region, edit_format.cursor_marker) is not None, cancel=cancel,
            copy_from=fitted.copy_from))
        stop_reason = StopReason(decoded.stop_reason)
        if stop_reason == StopReason.CANCELLED:
            return no_edit(Source.SUPERSEDED, StopReason.CANCELLED)
        with self._state:
            if decoded.counts is not None:
                self.counters.add(decoded.counts)
        rewrite = suggested_rewrite(edit_format, decoded.text, stop_reason == StopReason.STOP,
                                    stop_reason == StopReason.END, fitted.prompt.ends, fitted.region.text)
        edits = edits_between(fitted.region, rewrite) if rewrite is not None else []
        return NextEdit(edits, Source.MODEL, stop_reason, rewrite, prompt, decoded.result)

    def _take_text(self, session: CompletionSession, request: CompletionRequest) -> None:
        """Under the state lock: the request's text is the document's now, for its context
        chunk and the edit history."""
        session.text, session.cursor = request.text, request.cursor
        self.history.observe(request.document, self.workspace_path(request.path), request.text)

    def workspace_path(self, path: str) -> str:
        """A file's path as prompts name it: relative to the workspace, inside it."""
        return self.workspace.relative(path) if self.workspace.contains(path) else path

    def _in_turn(self, cancel: CancelFlag, work: Callable[[DecoderModel], A],
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

    def _complete(self, request: CompletionRequest, cancel: CancelFlag) -> Completion:
        with self._state:
            self.counters.requests += 1
            session = self.sessions.get(request.document)
            rests = (session.forward.lookup(request.text, request.cursor, self.cursor_context(request))
                     if session is not None else [])
            if rests:
                self.counters.forward_cache_hits += 1
                return Completion(rests[0], Source.FORWARD_CACHE, alternatives=rests[1:])
        ahead = self.prefetches.take(request)
        if ahead is not None:
            while not ahead.done.wait(PREFETCH_POLL_S):  # still computing what this request would compute
                if cancel.is_set():
                    ahead.cancel.set()
                    return superseded()
            if ahead.completion is not None and ahead.completion.source == Source.MODEL:
                with self._state:
                    if cancel.is_set():  # the document closed while the prefetch ran
                        return superseded()
                    session = self.sessions.setdefault(request.document, CompletionSession(request.path))
                    session.forward = ahead.forward
                    self._take_text(session, request)
                    self.counters.prefetch_hits += 1
                    if ahead.counts is not None:
                        self.counters.add(ahead.counts)
                return dataclasses.replace(ahead.completion, source=Source.PREFETCH)
        return self._in_turn(cancel, lambda model: self._complete_in_turn(request, model, cancel), empty_completion)

    def _complete_in_turn(self, request: CompletionRequest, model: DecoderModel, cancel: CancelFlag,
                          ahead: Prefetch | None = None) -> Completion:
        """Under the decoder's turn: the document entered, its prompt decoded. A prompt the
        decoder finds longer than its context (our count was an estimate, or a server's
        slots shrank) is tried once more at half the length. `ahead`: the prefetch this
        is, which keeps the completion's forward cache and counts until it is served (the
        request is what the user may make next, not what the document is)."""
        session = self._enter(request, cancel, ahead=ahead is not None)
        prompt, length, suffix = self.prompt(request, model, cancel)
        try:
            decoded, cursor = self._decode_at_cursor(request, prompt, length, suffix, cancel)
        except Refused as refused:
            if not refused.context_exceeded:
                raise
            log.info("%s: trying once more with a prompt of at most %d tokens", refused, length // 2)
            prompt, length, suffix = self.prompt(request, model, cancel, room=length // 2)
            decoded, cursor = self._decode_at_cursor(request, prompt, length, suffix, cancel)
        stop_reason = StopReason(decoded.stop_reason)
        if stop_reason == StopReason.CANCELLED:
            return superseded()
        candidates = tuple(Shown(text, postprocess(text, cursor, timed_out=timed_out), timed_out)
                           for text, timed_out in [(decoded.text, stop_reason == StopReason.TIME)] +
                           [(text, reason == StopReason.TIME) for text, reason in decoded.alternatives])
        with self._state:
            forward = session.forward if ahead is None else ahead.forward
            forward.remember(request.text, request.cursor, candidates)
            if ahead is None:
                if decoded.counts is not None:
                    self.counters.add(decoded.counts)
            else:
                ahead.counts = decoded.counts
        evaluated = decoded.counts.evaluated_tokens if decoded.counts is not None else 0
        shown = distinct([c.shown for c in candidates]) or [""]  # where the completion shows nothing, the next one
        return Completion(shown[0], Source.MODEL, stop_reason, prompt, evaluated, decoded.result,
                          alternatives=shown[1:])

    def _decode_at_cursor(self, request: CompletionRequest, prompt: list[int] | str, length: int, suffix: str,
                          cancel: CancelFlag) -> tuple[Decoded, CursorContext]:
        """The decoder's answer to `prompt`, and the cursor it is post-processed at."""
        options = self.config.generation
        cursor = self.cursor_context(request, suffix)
        decode = Decode(document=request.document, language=request.language, prompt=prompt, prompt_length=length,
                        max_tokens=options.max_tokens, draft_mode=options.draft_mode,
                        time_budget_ms=options.time_budget_ms,
                        sampling=Sampling(options.temperature, options.top_k, options.top_p),
                        heal=self.config.prompt.heal, stop=stops_for(cursor),
                        done=lambda text: cut_to_scope(text, cursor) != text, cancel=cancel,
                        candidates=options.candidates)
        return self.decoder.decode(decode), cursor

    def _enter(self, request: CompletionRequest, cancel: CancelFlag | None, ahead: bool = False,
               edits: bool = False) -> CompletionSession:
        """Under the decoder's turn: the request's document becomes the current one, and the
        workspace document the user left a context chunk (measured in the decoder's
        tokens, under the request's cancel flag) that the decoder may draft from. `ahead`:
        a prefetch, whose text is not yet the document's: the session's text and the edit
        history stay as they are. `edits`: a next-edit request, on the document's caches for
        next edits."""
        with self._state:
            # A request cancelled (a newer one, or the document closed: close() cancels
            # before it forgets) brings no session back.
            if cancel is not None and cancel.is_set():
                raise Cancelled
            session = self.sessions.setdefault(request.document, CompletionSession(request.path))
            left_document = self.current if self.current != request.document else None
            left = self.sessions.get(left_document) if left_document is not None else None
            self.current = request.document
            if not ahead:
                self._take_text(session, request)
        left_for_drafting = None
        if left is not None and left.text and self.workspace.contains(left.path):
            self.ring.add(left.path, left.text, left.cursor, lambda text: self.decoder.count(text, cancel))
            left_for_drafting = (left_document, left.text)
        in_workspace = request.path if self.workspace.contains(request.path) else None
        self.decoder.enter(request.document, in_workspace, left_for_drafting, cancel, edits)
        return session


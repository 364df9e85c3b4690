"""Inline completions: the forward cache, the prefetch, the prompt fitted to the
decoder's model, decoding at the cursor and post-processing; and warming, which
evaluates the same prompt ahead of a request.

    request -> forward cache? -> prefetch? -> decoder.decode(DecodeRequest): under its
      turn the decoder calls InlinePrompt (the document entered, the prompt fitted to
      its room; a server's retry at half the length calls it again) and decodes
      -> post-processed at the cursor, remembered in the forward cache, counted
"""

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

from completer.config import PromptOptions
from completer.decoders.decoder import Decoded, DecodeRequest, DecoderModel, Prompt
from completer.editor.documents import EDIT, INLINE, Document, stopped_by_close
from completer.editor.forward_cache import Shown, distinct
from completer.editor.postprocess import CursorContext, cut_to_scope, postprocess, stops_for
from completer.editor.prefetch import Prefetch, PrefetchSlot
from completer.editor.serving import NoRoom, Serving, empty_completion, no_room_warning, superseded
from completer.engine.speculative import Sampling
from completer.errors import Cancelled, PromptTooLong, Refused, Unavailable
from completer.editor.definitions_context import context_files
from completer.prompt import ContextFile, FimTemplate, Segment, cursor_sections, render
from completer.requests import CancelFlag, Completion, CompletionRequest, Source, StopReason
from completer.workspace import Workspace

log = logging.getLogger("completer.editor.completer")

P = TypeVar("P")  # a prompt as a decoder takes it

# How often a request served by a prefetch still being computed looks at its own cancel flag.
PREFETCH_POLL_S = 0.005


class PromptContext(NamedTuple):
    """The other files an inline prompt shows: the definitions the cursor likely calls
    (stablest: they change only when the set of definitions does), then the open files'
    chunks, oldest first."""

    definitions: tuple[ContextFile, ...] = ()
    chunks: tuple[ContextFile, ...] = ()

    def files(self) -> tuple[ContextFile, ...]:
        return self.definitions + self.chunks

    def smaller(self) -> "PromptContext | None":
        """One file less, the oldest chunk first, then the last definitions' file; None
        when there is none."""
        if self.chunks:
            return self._replace(chunks=self.chunks[1:])
        if self.definitions:
            return self._replace(definitions=self.definitions[:-1])
        return None


class Fitted(NamedTuple, Generic[P]):
    """A prompt fitted to its room, as `encode` made it."""

    prompt: P
    length: int  # in tokens
    suffix: str  # the text after the cursor it shows
    context: PromptContext  # the other files it shows


def fit_prompt(request: CompletionRequest, options: PromptOptions, template: FimTemplate | None, room: int,
               workspace: Workspace, context: PromptContext, encode: Callable[[list[Segment]], tuple[P, int]]
               ) -> Fitted[P]:
    """The prompt as `encode` makes it of the rendered segments (token ids, or the text a
    server tokenizes). The context's files, then prefix lines, then the characters around
    the cursor give way until it fits in `room` tokens; PromptTooLong when nothing is left
    to give. At most files + log2(lines) + log2(characters) + 3 encodings, whatever `room` is."""
    path = workspace.relative(request.path) if workspace.contains(request.path) else request.path
    repo = workspace.roots[0].name if workspace.roots else ""
    # Halving from more lines than there are would only encode the same prompt again.
    prefix_lines = min(options.prefix_lines, request.text.count("\n", 0, request.cursor))
    keep_chars = None
    while True:
        prefix, suffix = cursor_sections(request.text, request.cursor, prefix_lines, options.suffix_lines)
        if keep_chars is not None:  # one huge line (minified code): keep what is nearest the cursor
            prefix, suffix = prefix[max(0, len(prefix) - keep_chars):], suffix[:keep_chars]
        prompt, length = encode(render(template, path, prefix, suffix if template else "", context.files(), repo))
        if length <= room:
            return Fitted(prompt, length, suffix, context)
        if (smaller := context.smaller()) is not None:
            context = smaller
        elif prefix_lines:
            prefix_lines //= 2
        elif prefix or suffix:
            keep_chars = max(len(prefix), len(suffix)) // 2
        else:
            raise PromptTooLong(length, room)


class InlinePrompt:
    """A request's inline prompt, made when the decoder calls it (DecodeRequest.prompt):
    the document is entered on the first call. `ahead`: a prefetch, whose text is not yet
    the document's."""

    def __init__(self, inline: "InlineCompletions", request: CompletionRequest, cancel: CancelFlag,
                 ahead: bool = False):
        self.inline, self.request, self.cancel, self.ahead = inline, request, cancel, ahead
        self.entered: tuple[Document, str | None, tuple[str, str] | None] | None = None
        self.shared = False  # made for a shared server's model (DecoderModel.shared)

    def __call__(self, model: DecoderModel, room: int) -> Prompt:
        serving = self.inline.serving
        if self.entered is None:
            self.entered = serving.enter(self.request, self.cancel, model, self.ahead)
        self.shared = model.shared
        document, in_workspace, left = self.entered
        max_tokens = serving.config.generation.max_tokens
        try:
            fitted = self.inline.prompt(self.request, model, room)
        except PromptTooLong as error:
            raise NoRoom(no_room_warning(error, model.context_name, max_tokens)) from None
        cursor = self.inline.cursor_context(self.request, fitted.suffix)
        return Prompt(tokens=fitted.prompt, length=fitted.length, max_tokens=max_tokens,
                      stop=tuple(stops_for(cursor)), done=lambda text: cut_to_scope(text, cursor) != text,
                      in_workspace=in_workspace, left=left, made=(document, cursor, fitted.context))


class InlineCompletions:
    """Completions at the cursor, and the prefetch of the one after an accepted one."""

    def __init__(self, serving: Serving):
        self.serving = serving
        self.prefetches = PrefetchSlot()

    def cursor_context(self, request: CompletionRequest, suffix: str | None = None) -> CursorContext:
        """The cursor as post-processing sees it, with the suffix the prompt would take."""
        line_before, around = cursor_sections(request.text, request.cursor, 0,
                                              self.serving.config.prompt.suffix_lines)
        return CursorContext(line_before, around if suffix is None else suffix)

    def prompt(self, request: CompletionRequest, model: DecoderModel, room: int | None = None
               ) -> Fitted[list[int] | str]:
        """The request's prompt made with `model` in at most `room` tokens (by default the
        model's context less the answer's); PromptTooLong when none fits."""
        serving = self.serving
        if room is None:
            room = model.context_tokens - serving.config.generation.max_tokens - 1
        return fit_prompt(request, serving.config.prompt, model.template, room, serving.workspace,
                          self.context(request, model), model.encode)

    def context(self, request: CompletionRequest, model: DecoderModel) -> PromptContext:
        """The other files the request's prompt may show, their tokens counted by `model`."""
        serving = self.serving
        snippets = serving.repository.select(request, model.count)
        chunks = serving.ring.select(serving.config.prompt.cross_file_tokens,
                                     exclude=serving.workspace_path(request.path))
        return PromptContext(context_files(snippets, serving.workspace.relative), chunks)

    def decode_request(self, request: CompletionRequest, prompt: InlinePrompt) -> DecodeRequest:
        """What the decoder is asked for the request, its prompt made by `prompt`."""
        options = self.serving.config.generation
        return DecodeRequest(document=request.document, language=request.language, prompt=prompt,
                             answer_tokens=options.max_tokens + 1, draft_mode=options.draft_mode,
                             time_budget_ms=options.time_budget_ms,
                             sampling=Sampling(options.temperature, options.top_k, options.top_p),
                             heal=self.serving.config.prompt.heal, cancel=prompt.cancel,
                             candidates=options.candidates)

    def complete(self, request: CompletionRequest, cancel: CancelFlag) -> Completion:
        """From the forward cache, from the prefetch for this request, or decoded; nothing
        in a document context.exclude names."""
        serving = self.serving
        serving.counters.count(requests=1)
        if serving.repository.excluded(request.path):
            return empty_completion(Source.EXCLUDED, StopReason.NONE)
        rests = serving.documents.lookup(request, self.cursor_context(request))
        if rests:
            serving.counters.count(forward_cache_hits=1)
            return Completion(rests[0], Source.FORWARD_CACHE, alternatives=rests[1:])
        ahead = self.prefetches.take(request)
        if ahead is not None:
            while not ahead.done.wait(PREFETCH_POLL_S):  # still computing what this request would compute
                if cancel.is_set():
                    ahead.cancel.set()
                    return superseded()
            if ahead.completion is not None and ahead.completion.source == Source.MODEL:
                # The document closed while the prefetch ran: no session comes back.
                if not serving.documents.serve_from(request, serving.workspace_path(request.path), ahead.forward,
                                                    cancel):
                    return superseded()
                serving.counters.count(prefetch_hits=1)
                serving.counters.add(ahead.counts)
                return dataclasses.replace(ahead.completion, source=Source.PREFETCH)
        return serving.answer(lambda: self._decoded(request, cancel), empty_completion)

    def _decoded(self, request: CompletionRequest, cancel: CancelFlag, ahead: Prefetch | None = None) -> Completion:
        """The request decoded (one call to the decoder), post-processed at the cursor its
        prompt was made for. `ahead`: the prefetch this is, which keeps the completion's
        forward cache and counts until it is served (the request is what the user may make
        next, not what the document is)."""
        prompt = InlinePrompt(self, request, cancel, ahead=ahead is not None)
        started = time.monotonic()
        decoded = self.serving.decoder.decode(self.decode_request(request, prompt))
        stop_reason = StopReason(decoded.stop_reason)
        if stop_reason == StopReason.CANCELLED:
            return superseded()
        if prompt.shared and ahead is None and decoded.counts is not None:
            self.serving.load.answered((time.monotonic() - started) * 1000, decoded.counts.generated_tokens,
                                       decoded.counts.generation_ms)
        document, cursor, context = decoded.prompt.made
        candidates = tuple(Shown(text, postprocess(text, cursor, timed_out=timed_out), timed_out)
                           for text, timed_out in [(decoded.text, stop_reason == StopReason.TIME)] +
                           [(text, reason == StopReason.TIME) for text, reason in decoded.alternatives])
        self._keep(document, request, candidates, decoded, ahead)
        evaluated = decoded.counts.evaluated_tokens if decoded.counts is not None else 0
        shown = distinct([c.shown for c in candidates]) or [""]  # where the completion shows nothing, the next one
        return Completion(shown[0], Source.MODEL, stop_reason, decoded.prompt.tokens, evaluated, decoded.result,
                          alternatives=shown[1:], context=context.files())

    def _keep(self, document: Document, request: CompletionRequest, candidates: tuple[Shown, ...],
              decoded: Decoded, ahead: Prefetch | None) -> None:
        """The candidates into the forward cache and the decoding into the counters: the
        document's, or the prefetch's until it is served."""
        if ahead is None:
            self.serving.documents.remember(document, request, candidates)
            self.serving.counters.add(decoded.counts)
        else:
            ahead.forward.remember(request.text, request.cursor, candidates)
            ahead.counts = decoded.counts

    def prefetch(self, request: CompletionRequest, start: int) -> Completion | None:
        """Completer.prefetch; with lsp.back_off, none while a shared server is saturated (load.py)."""
        if (self.serving.documents.any_running(INLINE, EDIT) or request.closed.is_set()
                or self.serving.repository.excluded(request.path)
                or self.serving.config.lsp.back_off and self.serving.load.saturated):
            return None
        ahead = self.prefetches.begin(request, start)
        if ahead is None:
            return None
        self.serving.counters.count(prefetches=1)
        try:
            with stopped_by_close(request, ahead.cancel):
                ahead.completion = self.serving.answer(lambda: self._decoded(request, ahead.cancel, ahead),
                                                       empty_completion)
        finally:
            ahead.done.set()
        return ahead.completion

    def warm(self, request: CompletionRequest, cancel: CancelFlag) -> int:
        """Completer.warm, under the warm's own flag."""
        if self.serving.repository.excluded(request.path):
            return 0
        try:
            warmed = self.serving.decoder.warm(self.decode_request(request, InlinePrompt(self, request, cancel)))
        except (Cancelled, NoRoom, Unavailable):
            return 0  # closed; or a request will say so
        except Refused as error:
            log.warning("%s (this request only: the server is up)", error)
            return 0
        self.serving.counters.count(warmed_tokens=warmed)
        return warmed

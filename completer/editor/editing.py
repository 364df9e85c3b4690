"""Next edits: the editable region around the cursor, the recent edits across documents
and the text around it, in the model family's format (next_edit.py), fitted to the
context; the region written again (the decoder copy-drafts from it), and the answer is
the edits between the two."""

from completer.config import Config
from completer.decoders.decoder import DecodeRequest, DecoderModel, Prompt
from completer.editor.next_edit import (FORMATS, EditFitting, edits_between, engine_stops, fit_edit_prompt, recent,
                                        rewrite_end, suggested_rewrite)
from completer.editor.serving import NoRoom, Serving, no_edit
from completer.engine.speculative import Sampling
from completer.models.presets import PRESETS
from completer.requests import CancelFlag, CompletionRequest, NextEdit, Source, StopReason


def edit_format_name(config: Config) -> str:
    """edits.format, with `auto` the preset's format (a target of one's own: `instruction`)."""
    if config.edits.format != "auto":
        return config.edits.format
    if config.models.target is not None or config.models.preset not in PRESETS:
        return "instruction"
    return PRESETS[config.models.preset].edit_format


class EditPromptMaker:
    """A next-edit request's prompt, made when the decoder calls it (DecodeRequest.prompt):
    the document entered, the region, recent edits and chunks fitted to the room."""

    def __init__(self, serving: Serving, request: CompletionRequest, cancel: CancelFlag):
        self.serving, self.request, self.cancel = serving, request, cancel
        self.edit_format = FORMATS[edit_format_name(serving.config)]

    def __call__(self, model: DecoderModel, room: int) -> Prompt:
        serving, request, edit_format = self.serving, self.request, self.edit_format
        _, in_workspace, left = serving.enter(request, self.cancel, model)  # called once: no retry_shorter
        options = serving.config.edits
        path = serving.workspace_path(request.path)
        fitted = fit_edit_prompt(request.text, request.cursor, path, EditFitting(
            lines_above=options.lines_above, lines_below=options.lines_below, context_lines=options.context_lines,
            edit_format=edit_format, room=room, count=model.count,
            events=recent(serving.documents.recent_edits(), options.history_tokens),
            chunks=serving.ring.select(options.cross_file_tokens, exclude=path)))
        if fitted is None:
            raise NoRoom(f"no next edit: the cursor's line alone does not fit {model.context_name} with its rewrite")
        try:
            tokens, length = model.encode(list(fitted.prompt.segments))
        except ValueError as error:  # a format's control token that the model's vocabulary lacks
            raise NoRoom(f"no next edit: {error}; edits.format {edit_format.family} is for another model's "
                         "prompt") from None
        ends, region = fitted.prompt.ends, fitted.region.text
        return Prompt(tokens=tokens, length=length, max_tokens=fitted.answer_tokens,
                      stop=tuple(engine_stops(ends, region)),
                      done=lambda text: rewrite_end(text, ends, region, edit_format.cursor_marker) is not None,
                      copy_from=fitted.copy_from, in_workspace=in_workspace, left=left, made=fitted)


class NextEdits:
    """The next edit around a request's cursor, from the decoder."""

    def __init__(self, serving: Serving):
        self.serving = serving

    def next_edit(self, request: CompletionRequest, cancel: CancelFlag) -> NextEdit:
        """Completer.next_edit, under the request's flag; none in a document context.exclude names."""
        serving = self.serving
        if serving.repository.excluded(request.path):
            return no_edit(Source.EXCLUDED, StopReason.NONE)
        edit = serving.answer(lambda: self._decoded(request, cancel), no_edit)
        serving.counters.count(edit_requests=1, edits_suggested=bool(edit.edits),
                               superseded=edit.source == Source.SUPERSEDED)
        return edit

    def _decoded(self, request: CompletionRequest, cancel: CancelFlag) -> NextEdit:
        """The region written again (one call to the decoder), and the edits between the two."""
        generation = self.serving.config.generation
        maker = EditPromptMaker(self.serving, request, cancel)
        decoded = self.serving.decoder.decode(DecodeRequest(
            document=request.document, language=request.language, prompt=maker, answer_tokens=1, edits=True, retry_shorter=False,
            draft_mode=generation.draft_mode,
            sampling=Sampling(generation.temperature, generation.top_k, generation.top_p), cancel=cancel))
        stop_reason = StopReason(decoded.stop_reason)
        if stop_reason == StopReason.CANCELLED:
            return no_edit(Source.SUPERSEDED, StopReason.CANCELLED)
        self.serving.counters.add(decoded.counts)
        fitted = decoded.prompt.made
        rewrite = suggested_rewrite(maker.edit_format, decoded.text, stop_reason == StopReason.STOP,
                                    stop_reason == StopReason.END, fitted.prompt.ends, fitted.region.text)
        edits = edits_between(fitted.region, rewrite) if rewrite is not None else []
        return NextEdit(edits, Source.MODEL, stop_reason, rewrite, decoded.prompt.tokens, decoded.result)

"""Next edits: the editable region around the cursor, the recent edits across documents
and the text around it, in the model family's format (next_edit.py), fitted to the
context; the region written again (the decoder copy-drafts from it), and the answer is
the edits between the two."""

from completer.config import Config
from completer.decoders.protocol import Decode, DecoderModel
from completer.editor.next_edit import (FORMATS, EditFitting, edits_between, engine_stops, fit_edit_prompt, recent,
                                        rewrite_end, suggested_rewrite)
from completer.editor.serving import Serving, no_edit
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


class NextEdits:
    """The next edit around a request's cursor, from the decoder."""

    def __init__(self, serving: Serving):
        self.serving = serving

    def next_edit(self, request: CompletionRequest, cancel: CancelFlag) -> NextEdit:
        """Completer.next_edit, under the request's flag."""
        serving = self.serving
        edit = serving.in_turn(cancel, lambda model: self._in_turn(request, model, cancel), no_edit)
        serving.counters.count(edit_requests=1, edits_suggested=bool(edit.edits),
                               superseded=edit.source == Source.SUPERSEDED)
        return edit

    def _in_turn(self, request: CompletionRequest, model: DecoderModel, cancel: CancelFlag) -> NextEdit:
        serving = self.serving
        serving.enter(request, cancel, edits=True)
        options = serving.config.edits
        edit_format = FORMATS[edit_format_name(serving.config)]
        path = serving.workspace_path(request.path)
        fitting = EditFitting(lines_above=options.lines_above, lines_below=options.lines_below,
                              context_lines=options.context_lines, edit_format=edit_format,
                              room=model.context_tokens - 1, count=lambda text: serving.decoder.count(text, cancel),
                              events=recent(serving.documents.recent_edits(), options.history_tokens),
                              chunks=serving.ring.select(options.cross_file_tokens, exclude=path))
        fitted = fit_edit_prompt(request.text, request.cursor, path, fitting)
        if fitted is None:
            return no_edit(Source.NO_ROOM, StopReason.PROMPT_TOO_LONG, "no next edit: the cursor's line alone does "
                           f"not fit {model.context_name} with its rewrite")
        try:
            prompt, length = serving.decoder.encode(list(fitted.prompt.segments), cancel)
        except ValueError as error:  # a format's control token that the model's vocabulary lacks
            return no_edit(Source.NO_ROOM, StopReason.PROMPT_TOO_LONG,
                           f"no next edit: {error}; edits.format {edit_format.family} is for another model's prompt")
        generation, ends, region = serving.config.generation, fitted.prompt.ends, fitted.region.text
        decoded = serving.decoder.decode(Decode(
            document=request.document, language=request.language, prompt=prompt, prompt_length=length,
            max_tokens=fitted.answer_tokens, draft_mode=generation.draft_mode,
            sampling=Sampling(generation.temperature, generation.top_k, generation.top_p),
            stop=engine_stops(ends, region),
            done=lambda text: rewrite_end(text, ends, region, edit_format.cursor_marker) is not None, cancel=cancel,
            copy_from=fitted.copy_from))
        stop_reason = StopReason(decoded.stop_reason)
        if stop_reason == StopReason.CANCELLED:
            return no_edit(Source.SUPERSEDED, StopReason.CANCELLED)
        serving.counters.add(decoded.counts)
        rewrite = suggested_rewrite(edit_format, decoded.text, stop_reason == StopReason.STOP,
                                    stop_reason == StopReason.END, fitted.prompt.ends, fitted.region.text)
        edits = edits_between(fitted.region, rewrite) if rewrite is not None else []
        return NextEdit(edits, Source.MODEL, stop_reason, rewrite, prompt, decoded.result)

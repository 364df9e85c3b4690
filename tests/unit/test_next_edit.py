"""Next-edit suggestions, the text side: the region a model rewrites and the edits that
turn it into the rewrite."""

import re

from hypothesis import given
from hypothesis import strategies as st

from completer.config import Config, ModelOptions, NextEditOptions
from completer.editor.editing import edit_format_name
from completer.editor.next_edit import (FORMATS, EditEvent, EditFitting, InstinctFormat, InstructionFormat,
                                        SweepFormat, ZetaFormat, apply_edits, editable_region, edits_between,
                                        fit_edit_prompt, suggested_rewrite, with_ending_of)
from completer.models.presets import PRESETS
from completer.prompt import ContextFile
from completer.requests import TextEdit

# Lines of code-like text, with every line break LSP knows.
LINES = st.lists(st.text(alphabet="ab (x)=:", max_size=8) | st.sampled_from(["", "    pass"]),
                 max_size=12)
BREAK = re.compile(r"\r\n|\r|\n")
BREAKS = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def documents(draw) -> str:
    lines = draw(LINES)
    return "".join(line + draw(BREAKS) for line in lines) + draw(st.sampled_from(["", "tail"]))


@given(documents(), st.data(), st.integers(0, 4), st.integers(0, 4))
def test_the_region_is_whole_lines_around_the_cursor(text, data, above, below):
    cursor = data.draw(st.integers(0, len(text)))
    cursor -= text[cursor - 1:cursor + 1] == "\r\n"  # never inside a line break, as LSP positions are
    region = editable_region(text, cursor, above, below)
    assert text[region.start:region.end] == region.text and 0 <= region.cursor <= len(region.text)
    assert region.start + region.cursor == cursor
    assert region.start == 0 or text[region.start - 1] in "\r\n"  # starts a line
    assert region.end == len(text) or text[region.end - 1] in "\r\n"  # ends one
    before, after = text[region.start:cursor], text[cursor:region.end]
    assert len(BREAK.findall(before)) <= above and len(BREAK.findall(after)) <= below + 1


@given(documents(), documents(), st.data())
def test_the_edits_make_the_rewrite_and_touch_nothing_else(text, rewrite, data):
    cursor = data.draw(st.integers(0, len(text)))
    region = editable_region(text, cursor, 3, 3)
    edits = edits_between(region, rewrite)
    assert apply_edits(text, edits) == text[:region.start] + rewrite + text[region.end:]
    assert all(region.start <= e.start <= e.end <= region.end for e in edits)
    assert all(a.end <= b.start for a, b in zip(edits, edits[1:]))  # in order, apart
    assert all(e.text or e.start < e.end for e in edits)  # no empty edit
    assert (edits == []) == (rewrite == region.text)


def test_a_rename_is_an_edit_of_each_use_and_no_more():
    text = "import os\n\ndef area(width, height):\n    return width * height\n\nprint(area(2, 3))\n"
    region = editable_region(text, text.index("return"), 2, 1)
    rewrite = region.text.replace("width", "w")
    edits = edits_between(region, rewrite)
    uses = [at for at in range(len(text)) if text.startswith("width", at) and at >= region.start]
    assert len(edits) == 2 and all(use <= e.start <= e.end <= use + 5 for e, use in zip(edits, uses))
    assert [text.count("\n", 0, e.start) for e in edits] == [2, 3]  # on the two lines that use it


def test_no_edit_is_an_empty_answer_and_an_inserted_line_is_one_edit():
    text = "class Point:\n    def __init__(self, x):\n        self.x = x\n"
    region = editable_region(text, len(text), 5, 0)
    assert edits_between(region, region.text) == []
    added = region.text.replace("x):\n", "x, y):\n") + "        self.y = y\n"
    edits = edits_between(region, added)
    assert edits == [TextEdit(text.index("):"), text.index("):"), ", y"),
                     TextEdit(len(text), len(text), "        self.y = y\n")]


def test_a_rewrite_keeps_the_regions_last_line_breaks():
    assert with_ending_of("a\nb\n\n\n", "a\nc\n") == "a\nb\n"
    assert with_ending_of("a\nb", "a\nc\r\n") == "a\nb\r\n"
    assert with_ending_of("", "\n") == "\n"


def test_zetas_prompt_is_zeds_and_its_answer_is_the_text_between_the_markers():
    text = "import math\n\ndef area(r):\n    return r * r\n\nprint(area(2))\n"
    region = editable_region(text, text.index("return") + 4, 1, 0)
    event = EditEvent("shapes.py", "shapes.py", "x = 1\n", "x = 2\n")
    prompt = ZetaFormat().prompt("shapes.py", text[:region.start], region, text[region.end:], [event])
    assert prompt.text == (
        "### Instruction:\nYou are a code completion assistant and your task is to analyze user edits and then "
        "rewrite an excerpt that the user provides, suggesting the appropriate edits within the excerpt, taking "
        "into account the cursor location.\n\n### User Edits:\n\nUser edited shapes.py:\n```diff\n@@ -1 +1 @@\n"
        "-x = 1\n+x = 2\n```\n\n### User Excerpt:\n\n```shapes.py\n<|start_of_file|>\nimport math\n\n"
        "<|editable_region_start|>\ndef area(r):\n    retu<|user_cursor_is_here|>rn r * r\n<|editable_region_end|>"
        "\n\nprint(area(2))\n\n```\n\n### Response:\n")
    assert prompt.copy == "<|editable_region_start|>\ndef area(r):\n    return r * r\n<|editable_region_end|>"
    assert prompt.ends == ("<|editable_region_end|>",)
    answer = "<|editable_region_start|>\ndef area(radius):\n    return radius<|user_cursor_is_here|> * radius"
    assert ZetaFormat().rewrite(answer, stopped=True,
                                region_text=region.text) == "def area(radius):\n    return radius * radius"
    assert ZetaFormat().rewrite(answer, stopped=False, region_text=region.text) is None  # cut by the token limit
    assert ZetaFormat().rewrite("def area(radius):", stopped=True, region_text=region.text) is None  # not in the format


def test_sweeps_prompt_is_sweeps_plugins_and_its_control_token_is_one_segment():
    before = "import math\n\ndef area(width, height):\n    return width * height\n\nprint(1)\n"
    text = before.replace("area(width,", "area(w,")
    region = editable_region(text, text.index("(w") + 2, 1, 1)
    event = EditEvent("shapes.py", "shapes.py", before, text)
    prompt = SweepFormat().prompt("shapes.py", text[:region.start], region, text[region.end:], [event])
    # sweepai/cursortab.nvim server/provider/sweep/sweep.go: the edit's changed lines, then
    # the region before the edit, as it is, and where the model writes it again.
    assert prompt.text == (
        "<|file_sep|>shapes.py.diff\noriginal:\ndef area(width, height):\nupdated:\ndef area(w, height):\n"
        "<|file_sep|>original/shapes.py\n\ndef area(width, height):\n    return width * height\n"
        "<|file_sep|>current/shapes.py\n\ndef area(w, height):\n    return width * height\n"
        "<|file_sep|>updated/shapes.py\n")
    segments = prompt.segments
    assert "".join(segment.text for segment in segments) == prompt.text
    assert [s.text for s in segments if s.special] == ["<|file_sep|>"] * 4
    assert not any("<|file_sep|>" in s.text for s in segments if not s.special)
    assert prompt.copy == region.text and SweepFormat.ends_with_end_token and prompt.ends == ("<|file_sep|>", "</s>")
    # Other files' chunks first, in Qwen2.5-Coder's repository format.
    chunked = SweepFormat().prompt("shapes.py", text[:region.start], region, text[region.end:], [event],
                                   (ContextFile("units.py", "CM = 1\n"),))
    assert chunked.text == "<|file_sep|>units.py\nCM = 1\n" + prompt.text
    assert SweepFormat().rewrite("def area(w, height):\n    return w * height\n", stopped=True,
                                 region_text=region.text) is not None
    assert SweepFormat().rewrite("def area(w, height):\n", stopped=False, region_text=region.text) is None


def test_instincts_prompt_is_continues_chat_and_its_answer_is_the_region():
    text = "import math\n\ndef area(r):\n    return r * r\n\nprint(area(2))\n"
    region = editable_region(text, text.index("return") + 4, 1, 0)
    events = [EditEvent("a", "a.py", "x = 1\n", "x = 2\n"), EditEvent("b", "b.py", "y = 1\n", "y = 2\n")]
    chunks = (ContextFile("h.py", "def h():\n    pass\n"), ContextFile("g.py", "G = 1\n"))
    prompt = InstinctFormat().prompt("shapes.py", text[:region.start], region, text[region.end:], events, chunks)
    # continuedev/continue core/nextEdit/: NextEditPromptEngine.ts's template, filled by
    # templating/instinct.ts's blocks (the edits in the order they were made), in Qwen's ChatML.
    system = InstinctFormat.SYSTEM
    assert system.startswith("You are Instinct, an intelligent next-edit predictor developed by Continue.dev.")
    assert system.endswith("unless there are obvious typos or errors.")
    assert prompt.text == (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"
        "Reference the user excerpt, user edits, and the snippets to understand the developer's intent. Update the "
        "editable region of the user excerpt by predicting and completing the changes they would have made next. "
        "This may be a deletion, addition, or modification of code.\n\n### Context:\n"
        "<|context_file|>: h.py\n<|snippet|>\ndef h():\n    pass\n\n<|context_file|>: g.py\n<|snippet|>\nG = 1\n\n"
        "### User Edits:\n\n"
        'User edited file "a.py"\n\n```diff\n@@ -1 +1 @@\n-x = 1\n+x = 2\n```\n'
        'User edited file "b.py"\n\n```diff\n@@ -1 +1 @@\n-y = 1\n+y = 2\n```\n\n'
        "### User Excerpt:\nshapes.py\n\nimport math\n\n<|editable_region_start|>\ndef area(r):\n"
        "    retu<|user_cursor_is_here|>rn r * r\n<|editable_region_end|>\n\nprint(area(2))```\n### Response:"
        "<|im_end|>\n<|im_start|>assistant\n")
    assert [s.text for s in prompt.segments if s.special] == ["<|im_start|>", "<|im_end|>"] * 2 + ["<|im_start|>"]
    assert prompt.copy == "def area(r):\n    return r * r" and InstinctFormat.ends_with_end_token
    assert prompt.ends == ("<|im_end|>", "<|editable_region_end|>")
    answer = "def area(radius):\n    return radius<|user_cursor_is_here|> * radius"
    rewritten = "def area(radius):\n    return radius * radius"
    assert InstinctFormat().rewrite(answer, stopped=True, region_text=region.text) == rewritten
    assert InstinctFormat().rewrite(answer, stopped=False, region_text=region.text) is None  # cut by the token limit
    # As Instinct's evaluation reads it: between the markers (cut at the end marker, a stop).
    assert InstinctFormat().rewrite(f"<|editable_region_start|>\n{answer}\n", stopped=True,
                                    region_text=region.text) == rewritten
    # As Continue's postprocessing reads it: a fence's lines are not the region's.
    assert InstinctFormat().rewrite(f"```python\n{answer}\n```\n", stopped=True, region_text=region.text) == rewritten


def test_a_document_that_spells_a_control_token_stays_text():
    """This very file spells `<|file_sep|>` and `<|im_end|>`: in a prompt they are its
    text, never the control tokens that end or restructure the prompt."""
    text = 'SEPARATOR = "<|file_sep|>"\nEND = "<|im_end|>"\n'
    region = editable_region(text, 0, 0, 1)
    for edit_format in (SweepFormat(), InstinctFormat()):
        prompt = edit_format.prompt("formats.py", "", region, "", [EditEvent("f", "formats.py", "", text)])
        special = [segment.text for segment in prompt.segments if segment.special]
        spelt = [segment.text for segment in prompt.segments if not segment.special]
        assert len(special) == {"sweep": 4, "instinct": 5}[edit_format.family]
        assert any('"<|file_sep|>"' in piece for piece in spelt) and any('"<|im_end|>"' in piece for piece in spelt)


def test_auto_is_the_presets_format_and_a_target_of_ones_own_gets_the_instruction_format():
    assert edit_format_name(Config(models=ModelOptions(preset="zeta"))) == "zeta"
    assert edit_format_name(Config(models=ModelOptions(preset="sweep"))) == "sweep"
    assert edit_format_name(Config(models=ModelOptions(preset="zeta", target="own.gguf"))) == "instruction"
    assert edit_format_name(Config(models=ModelOptions(preset="smol"))) == "instruction"
    assert edit_format_name(Config(models=ModelOptions(preset="smol"), edits=NextEditOptions(format="zeta"))) == "zeta"
    assert {preset.edit_format for preset in PRESETS.values()} <= set(FORMATS)


FILE = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(40))


def characters(text: str) -> int:
    return len(text)


def fit_around_f20(edit_format, room: int, count=characters, events=(), chunks=()):
    """fit_edit_prompt at f20 in FILE, a region of 3 lines each side and 8 of context."""
    return fit_edit_prompt(FILE, FILE.index("f20"), "main.py", EditFitting(
        lines_above=3, lines_below=3, context_lines=8, edit_format=edit_format, room=room, count=count,
        events=list(events), chunks=tuple(chunks)))


@given(st.integers(0, 4), st.integers(0, 4), st.integers(0, 6000))
def test_other_files_chunks_give_way_first_then_the_oldest_edits(chunk_count, event_count, room):
    chunks = tuple(ContextFile(f"chunk{i}.py", f"CHUNK_{i} = {i}\n" * 20) for i in range(chunk_count))
    events = [EditEvent(f"e{i}", f"event{i}.py", "a = 1\n", f"a = {i + 2}\n") for i in range(event_count)]
    fitted = fit_around_f20(InstructionFormat(), room, events=events, chunks=chunks)
    if fitted is None:
        return
    assert fitted.prompt_tokens + fitted.answer_tokens <= room
    kept_chunks = [i for i in range(chunk_count) if f"The file chunk{i}.py:\nCHUNK_{i}" in fitted.prompt.text]
    kept_events = [i for i in range(event_count) if f"User edited event{i}.py:" in fitted.prompt.text]
    assert kept_chunks == list(range(chunk_count - len(kept_chunks), chunk_count))  # the newest
    assert kept_events == list(range(event_count - len(kept_events), event_count))
    if kept_chunks:
        assert len(kept_events) == event_count
    if fitted.region.text.count("\n") < 7:  # the region shrank: nothing else was left to give
        assert not kept_chunks and not kept_events


def test_zetas_prompt_shows_no_other_files():
    """Zed's zeta1 prompt has no other files, so Zeta never saw them: none are shown, and
    none are measured while a prompt too long is fitted. The copy of a region is
    measured once, however often the prompt around it is."""
    def fit(chunks: tuple[ContextFile, ...]) -> tuple[str, list[str], str]:
        measured = []

        def count(text: str) -> int:
            measured.append(text)
            return len(text)

        fitted = fit_around_f20(ZetaFormat(), 900, count, chunks=chunks)
        assert fitted is not None
        return fitted.prompt.text, measured, fitted.prompt.copy

    alone = fit(())
    _, measured, copy = alone
    assert measured.count(copy) == 1 and len(measured) == 3  # the context gave way once
    assert fit(tuple(ContextFile(f"helper{i}.py", "def helper():\n    return 1\n") for i in range(3))) == alone


def test_copy_drafting_draws_on_the_region_then_the_lines_the_newest_edits_made():
    events = [EditEvent("u", "units.py", "CM = 1\nMM = 2\n", "CM = 1\nMM = 3\n"),
              EditEvent("m", "main.py", "def f(width):\n    pass\n", "def f(new_width):\n    pass\n")]
    fitted = fit_around_f20(InstructionFormat(), 100_000, events=events)
    assert fitted.copy_from == f"{fitted.prompt.copy}\ndef f(new_width):\nMM = 3"
    # An edit that gave way to the room is not drawn on either.
    tight = fit_around_f20(InstructionFormat(), len(fitted.prompt.text) + fitted.answer_tokens - 1, events=events)
    assert tight.copy_from == f"{tight.prompt.copy}\ndef f(new_width):"


# Lines a region may hold that a parser could take for its format's own: every format's
# markers and stop strings, alone on a line or inside one, and code fences.
MARKER_LINES = st.sampled_from([
    "</region>", "<region>", "x = '<cursor>'", "<cursor>", "<|editable_region_start|>", "<|editable_region_end|>",
    "s = '<|user_cursor_is_here|>'", "<|start_of_file|>", "</s>", "<s>old</s>", "<|file_sep|>", "<|im_end|>",
    "<|context_file|>: a.py", "```", "```python", "    pass"])


def copied(edit_format, region) -> tuple[str, bool]:
    """A model's answer that writes the region again unchanged, as the format's model
    writes one (its cursor marker echoed where the format shows it), and whether it
    ends with an end-of-generation token."""
    body = region.text.removesuffix("\n")
    at = min(region.cursor, len(body))
    if isinstance(edit_format, InstructionFormat):
        return region.text[:region.cursor] + "<cursor>" + region.text[region.cursor:] + "</region>\n\nmore", False
    if isinstance(edit_format, ZetaFormat):
        marked = body[:at] + "<|user_cursor_is_here|>" + body[at:]
        return f"<|editable_region_start|>\n{marked}\n<|editable_region_end|>", False
    return region.text, True


@given(st.lists(MARKER_LINES | st.text(alphabet="ab =", max_size=6), min_size=1, max_size=8), st.data(),
       st.sampled_from(sorted(FORMATS)))
def test_a_copy_of_any_region_is_no_edit_whatever_markers_it_holds(lines, data, family):
    """Stop strings end a rewrite only where the format writes them, and parsing removes
    nothing the document holds: its markers, its stop strings, its fences."""
    text = "".join(line + "\n" for line in lines)
    region = editable_region(text, data.draw(st.integers(0, len(text))), 2, 2)
    edit_format = FORMATS[family]
    prompt = edit_format.prompt("a.md", text[:region.start], region, text[region.end:], [])
    output, ended = copied(edit_format, region)
    rewrite = suggested_rewrite(edit_format, output, False, ended, prompt.ends, region.text)
    if rewrite is None:  # an empty region written again empty: no answer, as no edit
        assert not region.text.strip()
        return
    assert edits_between(region, rewrite) == []

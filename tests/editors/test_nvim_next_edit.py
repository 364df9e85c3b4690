"""The Neovim plugin's next edits (editor-extensions/nvim/lua/completer/next_edit.lua) in a
real headless Neovim 0.11.4 against the real server with the smol models: no mocks.

tests/editors/nvim/plugin_next_edit.lua renames a parameter as a user would and records what the
plugin drew and did, with the edits the server sent captured on their way to the plugin;
the assertions are here, with this file's own reading of where each edit is drawn and
what applying the edits makes of the text.
"""

import json
import re

import pytest

from test_nvim_plugin import checks, on_screen, run_nvim, user_screen

pytestmark = pytest.mark.slow  # a real Neovim

DELETE, INSERT = "CompleterNextEditDelete", "CompleterNextEditInsert"


@pytest.fixture(scope="module")
def session(smol, smol_cache, tmp_path_factory) -> dict:
    """One Neovim session through tests/editors/nvim/plugin_next_edit.lua."""
    answer = run_nvim("plugin_next_edit.lua", tmp_path_factory.mktemp("nvim-next-edit"), smol_cache, timeout_s=420)
    assert "error" not in answer, answer.get("error")
    return answer


def offset(lines: list[str], position: dict) -> int:
    """A position's offset in the lines joined. The text is ASCII: every position
    encoding counts its characters alike."""
    return sum(len(line) + 1 for line in lines[:position["line"]]) + position["character"]


def applied(lines: list[str], edits: list[dict]) -> tuple[list[str], list[int]]:
    """The lines with the edits (in order, apart) applied, and the cursor after the last
    one's new text, as Neovim gives it (1-based line, 0-based column)."""
    text, shift = "\n".join(lines), 0
    for edit in edits:
        start, end = offset(lines, edit["range"]["start"]) + shift, offset(lines, edit["range"]["end"]) + shift
        text = text[:start] + edit["text"] + text[end:]
        shift += len(edit["text"]) - (end - start)
        after = start + len(edit["text"])
    before_cursor = text[:after].split("\n")
    return text.split("\n"), [len(before_cursor), len(before_cursor[-1])]


BLANK = re.compile(r"[ \t\r\n\f\v]*")  # Lua's %s: what the plugin counts as blank
LINE_BREAK = re.compile(r"\r\n?|\n")


def blank_lines_label(edit: dict, lines: list[str]) -> str | None:
    """What an edit that only deletes or inserts blank lines does, as its label says it
    (line breaks inserted less removed); None for any other edit."""
    start, end, text = edit["range"]["start"], edit["range"]["end"], edit["text"]
    removed = "\n".join(lines)[offset(lines, start):offset(lines, end)]
    added = len(LINE_BREAK.findall(text)) - removed.count("\n")
    if not (BLANK.fullmatch(removed) and BLANK.fullmatch(text)) or added == 0:
        return None
    return f"{'⌫' if added < 0 else '↵'} {abs(added)} blank line{'' if abs(added) == 1 else 's'}"


def drawn(edit: dict, lines: list[str] | None = None) -> list[dict]:
    """The extmarks an edit is drawn with: the range it replaces highlighted; its text
    inline after that range when both stay within a line, else as virtual lines (without
    the text's last line break): above the line it is inserted before when it is whole
    lines inserted there, below the range's last line otherwise. An edit of blank lines
    only shows a label at its start instead of its text; `lines` (the buffer's as it was
    drawn on) tell those apart, and without them none is expected."""
    start, end, text = edit["range"]["start"], edit["range"]["end"], edit["text"]
    marks = []
    empty = start == end
    if not empty:
        marks.append({"row": start["line"], "col": start["character"], "end_row": end["line"],
                      "end_col": end["character"], "hl_group": DELETE})
    label = blank_lines_label(edit, lines) if lines is not None else None
    if label:
        return marks + [{"row": start["line"], "col": start["character"], "virt_text": f"{label} ",
                         "virt_text_pos": "inline"}]
    if start["line"] == end["line"] and "\n" not in text:
        if text:
            marks.append({"row": end["line"], "col": end["character"], "virt_text": text, "virt_text_pos": "inline"})
        return marks
    lines = text.split("\n")
    whole_lines = lines[-1] == ""
    lines = lines[:-1] if whole_lines else lines
    above = whole_lines and empty and start["character"] == 0
    if lines:
        marks.append({"row": start["line"] if above else end["line"], "col": 0, "virt_lines": lines,
                      "virt_lines_above": above})
    return marks


def canonical(marks: list[dict]) -> list[dict]:
    """Extmarks as drawn() writes them: the details they have, in a stable order."""
    kept = [{key: value for key, value in mark.items()
             if value is not None and (key != "virt_lines_above" or mark["virt_lines"] is not None)}
            for mark in marks]
    return sorted(kept, key=lambda mark: json.dumps(mark, sort_keys=True))


def expected_marks(edits: list[dict], lines: list[str] | None = None) -> list[dict]:
    return canonical([mark for edit in edits for mark in drawn(edit, lines)])


def edits_of(answer: dict) -> list[dict]:
    edits = answer["result"]["edits"]
    assert edits, "the smol model suggested no edit here: the scenario needs one"
    return edits


def test_after_a_rename_tab_goes_to_the_next_edit_then_applies_it_as_one_undo_step(session):
    found = checks(session, "accept")["accept"]
    edits = edits_of(found["answer"])
    assert {edit["textDocument"]["version"] for edit in edits} == {found["version"]}
    assert canonical(found["marks"]) == expected_marks(edits, found["before"])  # what was suggested is shown
    first = edits[0]["range"]["start"]
    assert found["cursor"][0] - 1 != first["line"], "this test needs an edit away from the cursor"
    assert found["kept"] == found["marks"]  # dismissing the ghost text (if any) kept the next edit
    # <Tab> (in Insert mode): to the first edit's start; <Tab> again: every edit applied.
    assert found["jumped"] == [first["line"] + 1, first["character"]] and found["jump_mode"] == "i"
    assert found["inline_asked_at_edit"] == 0  # no ghost text there to take the next <Tab>
    expected, cursor = applied(found["before"], edits)
    assert found["after"] == expected
    assert found["after_cursor"] == cursor and found["marks_after"] == []
    assert found["undone"] == found["before"]  # one `u`: all the edits, and only them
    assert found["stats_before"] == {"shown": 1, "accepted": 0, "rejected": 0}
    assert found["accepted_counted"] and found["stats"] == {"shown": 1, "accepted": 1, "rejected": 0}


def test_escape_dismisses_the_next_edit_and_the_server_counts_a_rejection(session):
    renamed = checks(session, "accept")["accept"]["before"]
    found = checks(session, "dismiss")["dismiss"]
    edits = edits_of(found["answer"])
    assert found["answers"] == 1  # :CompleterNextEdit asked once
    assert canonical(found["marks"]) == expected_marks(edits, found["lines"])  # <Esc> changed no line
    first = edits[0]["range"]["start"]
    assert first["line"] != 3, "this test needs an edit away from the cursor's line"
    assert found["jumped"] == [first["line"] + 1, first["character"]]  # <Tab> in Normal mode
    assert found["marks_after"] == [] and found["lines"] == renamed  # <Esc>: hidden, nothing applied
    assert found["user_tab"] == 1  # with nothing shown, <Tab> is the user's own again
    before = found["stats_before"]
    assert found["rejected_counted"]
    assert found["stats"] == {"shown": before["shown"], "accepted": before["accepted"],
                              "rejected": before["rejected"] + 1}


def test_edits_for_a_version_the_buffer_has_left_are_never_shown(session):
    found = checks(session, "outdated")["outdated"]
    edits = edits_of(found["answer"])
    assert {edit["textDocument"]["version"] for edit in edits} == {found["version_before"]}
    assert found["version"] != found["version_before"]  # the buffer changed as they arrived
    assert found["marks"] == [] and found["marks_later"] == []
    assert found["stats"]["shown"] == found["stats_before"]["shown"]  # no didShowInlineEdit


def test_the_session_raised_no_error(session):
    assert session["errmsg"] == ""
    assert session["notifications"] == []
    assert "Error" not in session["messages"] and "stack traceback" not in session["messages"], session["messages"]


def test_the_screen_shows_the_next_edit_where_it_would_go(smol, smol_cache, tmp_path):
    """A Neovim with a screen (in a terminal of another one, read as text), where the user
    renames the parameter and leaves Insert mode: the next edit's text is on the screen
    where it would go. The screen is kept in tmp_path / "screen.txt"."""
    screen, shown = user_screen("next_edit_screen_user.lua", tmp_path, smol_cache)
    assert any(mark["virt_lines"] or mark["virt_text"] for mark in shown["marks"])
    expected = on_screen(shown["lines"], shown["marks"])
    assert screen[:len(expected)] == expected, "\n".join(screen)


def test_a_change_typed_ahead_of_insert_modes_events_asks_for_a_next_edit(session):
    found = checks(session, "typed_ahead")["typed_ahead"]
    assert found["line"] == "def area(h, height):"
    assert found["sent"] and found["asked"] == 1 and found["version"] == found["buffer_version"]


def test_keys_typed_ahead_at_a_next_edit_drop_it_rather_than_apply_it_shifted(session):
    """feedkeys("ix<Tab>") at the next edit: the "x" changes the buffer and <Tab> comes
    before any TextChangedI. The edits are for the text without the "x": the plugin no
    longer reports them shown, and <Tab> does what it does with nothing shown (it types
    blanks: the python ftplugin's expandtab) instead of applying them at shifted
    positions."""
    found = checks(session, "typed_ahead_accept")["typed_ahead_accept"]
    edits = edits_of(found["answer"])
    assert canonical(found["marks"]) == expected_marks(edits, found["before"])
    row, col = found["cursor"][0] - 1, found["cursor"][1]
    assert row == edits[0]["range"]["start"]["line"]  # at the edit: <Tab> would apply it
    before, after = found["before"], found["after"]
    assert after[:row] + after[row + 1:] == before[:row] + before[row + 1:]
    assert re.fullmatch(re.escape(before[row][:col] + "x") + r"[ \t]+" + re.escape(before[row][col:]), after[row]), \
        (before[row], after[row])
    assert found["visible_at_tab"] is False
    assert found["marks_after"] == []
    assert found["stats"]["accepted"] == found["stats_before"]["accepted"]


def plain_edit(start: tuple[int, int], end: tuple[int, int], text: str) -> dict:
    return {"text": text, "range": {"start": {"line": start[0], "character": start[1]},
                                    "end": {"line": end[0], "character": end[1]}}}


SHAPES = ["import math", "", "", "def area(width, height):", "    return width * height"]
# name -> (the buffer's lines, the edit, the label it shows at its start or None, and the
# screen's line (as on_screen draws it) at the index of the edit's start line)
BLANK_CASES = {
    # As seen in a real run: the edit removes a blank line, and nothing showed.
    "delete a blank line": (SHAPES, plain_edit((1, 0), (2, 0), ""), "⌫ 1 blank line", "⌫ 1 blank line "),
    "delete two blank lines, one of blanks": (["x = 1", "    ", "", "y = 2"], plain_edit((0, 5), (2, 0), ""),
                                              "⌫ 2 blank lines", "x = 1⌫ 2 blank lines "),
    "insert a blank line": (SHAPES, plain_edit((3, 0), (3, 0), "\n"), "↵ 1 blank line",
                            "↵ 1 blank line def area(width, height):"),
    "insert two blank lines of a CRLF document": (SHAPES, plain_edit((3, 0), (3, 0), "\r\n\r\n"),
                                                  "↵ 2 blank lines", "↵ 2 blank lines def area(width, height):"),
    # Blanks within a line show as they are: their highlight has a background.
    "indent a line": (SHAPES, plain_edit((4, 0), (4, 4), "        "), None, "            return width * height"),
    "rename a word": (SHAPES, plain_edit((4, 11), (4, 16), "w"), None, "    return widthw * height"),
    "insert a line among blank lines": (SHAPES, plain_edit((1, 0), (1, 0), "x = 1\n"), None, "x = 1"),
}


def test_an_edit_of_blank_lines_only_shows_a_label_at_its_start(tmp_path):
    """Drawn as other edits, the deletion of a blank line (a highlight on an empty line)
    or the insertion of blank lines (empty virtual lines, like the buffer's own) shows
    nothing, yet <Tab> applies it: it shows a label instead. No server: the plugin's
    drawing function, in a headless Neovim, on each case's buffer."""
    cases = {name: {"lines": lines, "edit": edit} for name, (lines, edit, _, _) in BLANK_CASES.items()}
    answer = run_nvim("next_edit_blank.lua", tmp_path, tmp_path / "cache", timeout_s=60, lua=True,
                      CASES=json.dumps(cases))
    assert "error" not in answer, answer.get("error")
    for name, (lines, edit, label, screen_line) in BLANK_CASES.items():
        marks = answer["checks"][name]
        assert "error" not in marks, (name, marks)
        assert blank_lines_label(edit, lines) == label, name
        assert canonical(marks) == expected_marks([edit], lines), name
        start = edit["range"]["start"]
        labels = [mark for mark in marks if mark["virt_text"] and mark["virt_text"].rstrip() == label]
        assert [(mark["row"], mark["col"]) for mark in labels] == ([] if label is None else
                                                                   [(start["line"], start["character"])]), name
        assert on_screen(lines, marks)[start["line"]] == screen_line, name
    assert answer["errmsg"] == "" and answer["notifications"] == []

"""Editing as users do it, through the Neovim plugin (editor-extensions/nvim) in a real
headless Neovim 0.11.4 against the real server with the smol models: no mocks.

tests/editors/nvim/plugin_editing.lua types into tab-indented Python, after emoji and CJK, on
lines that end in a stray "\\r" and in a CR-only file; types keys ahead of the server
(feedkeys, macros), pastes, undoes right after <Tab>, closes buffers with requests in
flight and switches buffers while a next edit is shown. It records what was shown,
what the buffer became and the items the server sent (with the line each was asked
at); the assertions are here, with this file's own reading of what taking an item
gives: it replaces the rest of the cursor's line as the server reads that line.
Nothing wrong may be shown or applied: ghost text at the cursor, the buffer getting
exactly what was shown and nothing else. The unicode section runs again in a Neovim
whose client offers UTF-8 alone, and in one that offers UTF-32 alone (Neovim offers all
three, and the server takes UTF-16), so that each position encoding's columns are checked.
"""

import re

import pytest

from test_nvim_line_endings import BREAK, breaks
from test_nvim_next_edit import applied, canonical, edits_of, expected_marks
from test_nvim_plugin import checks, run_nvim

pytestmark = pytest.mark.slow  # a real Neovim

EMOJI = re.compile(r"[\U0001F300-\U0001FAFF]")
CJK = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
UNIT_BYTES = {"utf-8": 1, "utf-16": 2, "utf-32": 4}


@pytest.fixture(scope="module")
def session(smol, smol_cache, tmp_path_factory) -> dict:
    """One Neovim session through every section of tests/editors/nvim/plugin_editing.lua."""
    answer = run_nvim("plugin_editing.lua", tmp_path_factory.mktemp("nvim-editing"), smol_cache, timeout_s=300)
    assert "error" not in answer, answer.get("error")
    return answer


@pytest.fixture(scope="module", params=["utf-8", "utf-32"])
def encoded(request, smol, smol_cache, tmp_path_factory) -> dict:
    """The unicode section in a Neovim whose client offers `request.param` alone."""
    answer = run_nvim("plugin_editing.lua", tmp_path_factory.mktemp(f"nvim-editing-{request.param}"), smol_cache,
                      timeout_s=180, SECTIONS="unicode", ENCODING=request.param)
    assert "error" not in answer, answer.get("error")
    assert answer["checks"]["encoding"] == request.param  # negotiated with the server
    return answer


def units(text: str, encoding: str) -> int:
    """`text`'s length in the position encoding's code units."""
    codec = {"utf-8": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}[encoding]
    return len(text.encode(codec)) // UNIT_BYTES[encoding]


def at_byte(line: str, col: int) -> tuple[str, str]:
    """`line` cut at byte `col` (Neovim's columns are bytes of UTF-8)."""
    data = line.encode()
    return data[:col].decode(), data[col:].decode()


def server_rest(tail: str) -> str:
    """What follows the cursor on its line as the server reads it: a "\\r" ending a buffer
    line (a CRLF line in a buffer whose 'fileformat' is unix) is half of a line break."""
    return tail.removesuffix("\r")


def lsp_lines(text: str) -> list[str]:
    return BREAK.split(text)


def shown_text(item: str, rest: str) -> str:
    """What the ghost text shows of `item`: the item replaces `rest`, and ends with it when
    it is not blank; the buffer shows that copy already."""
    return item[:len(item) - len(rest)] if rest.strip() and item.endswith(rest) else item


def assert_taken(found: dict, encoding: str) -> None:
    """The suggestion was asked for the line as it was and drawn at the cursor, and <Tab>
    gave the buffer exactly the item there, the rest of the buffer as it was."""
    before, (row, col) = found["before"], found["cursor"]
    ghost, answer = found["ghost"], found["answer"]
    [item] = answer["items"]  # one candidate: the server's default
    line = before[row - 1]
    assert answer["asked_line"] == line
    head, tail = at_byte(line, col)
    rest = server_rest(tail)
    # The server read the cursor where the client put it: the item's range starts there
    # and ends at the end of the line as the server reads it.
    assert item["range"] == {"start": {"line": row - 1, "character": units(head, encoding)},
                             "end": {"line": row - 1, "character": units(head + rest, encoding)}}
    assert (ghost["row"], ghost["col"], ghost["pos"], ghost["count"]) == (row - 1, col, "inline", 1)
    shown = shown_text(item["text"], rest)
    assert ghost["text"] == "\n".join(lsp_lines(shown)).replace("\t", " " * found["tabstop"])
    new = lsp_lines(item["text"])
    new[0] = head + new[0]
    new[-1] += tail[len(rest):]  # the "\r" ending the line stays
    assert found["after"] == before[:row - 1] + new + before[row:]
    shown_lines = lsp_lines(shown)
    end = col + len(shown_lines[0].encode()) if len(shown_lines) == 1 else len(shown_lines[-1].encode())
    assert found["after_cursor"] == [row + len(shown_lines) - 1, end] and found["mode"] == "i"


def encoding_of(session: dict) -> str:
    return session["checks"]["encoding"]


def test_tab_indented_text_is_shown_at_the_cursor_and_taken_with_its_tabs(session):
    found = checks(session, "tabs")["tabs"]
    assert found["expandtab"] is False
    header, body = found["header"], found["body"]
    assert "\t" in header["answer"]["items"][0]["text"], "this test needs an item indented with a tab"
    assert_taken(header, encoding_of(session))
    assert body["before"][body["cursor"][0] - 1].startswith("\t")  # a tab before the cursor: 1 byte, 4 cells
    assert_taken(body, encoding_of(session))


def assert_unicode(found: dict, encoding: str) -> None:
    for name in ("middle", "ending"):
        taken = found[name]
        head, tail = at_byte(taken["before"][taken["cursor"][0] - 1], taken["cursor"][1])
        assert EMOJI.search(head) and CJK.search(head), head
        if name == "middle":
            assert EMOJI.search(tail) and CJK.search(tail), tail
        assert_taken(taken, encoding)


def test_after_emoji_and_cjk_the_suggestion_is_shown_and_taken_at_the_cursor(session):
    assert encoding_of(session) == "utf-16"  # Neovim 0.11 offers UTF-8 first, and UTF-16, which the server takes
    assert_unicode(checks(session, "unicode")["unicode"], "utf-16")


def test_after_emoji_and_cjk_in_utf8_and_utf32_the_suggestion_is_shown_and_taken_at_the_cursor(encoded):
    assert_unicode(checks(encoded, "unicode")["unicode"], encoded["checks"]["encoding"])
    assert encoded["errmsg"] == "" and encoded["notifications"] == []


def item_texts(found) -> list[str]:
    """The text of every item the server sent that `found` (a section's checks) holds."""
    if isinstance(found, dict):
        own = [item["text"] for item in found.get("items", []) if isinstance(item, dict) and "text" in item]
        return own + [text for key, value in found.items() if key != "items" for text in item_texts(value)]
    if isinstance(found, list):
        return [text for value in found for text in item_texts(value)]
    return []


def test_no_suggestion_holds_half_a_character(session):
    """A completion cut at max_tokens inside an emoji ends before it (it ended in U+FFFD,
    shown and inserted)."""
    texts = item_texts(session["checks"])
    assert texts
    assert [text for text in texts if "\ufffd" in text] == []


def test_on_a_line_ending_in_a_stray_cr_the_suggestion_goes_before_it_and_it_stays(session):
    """A file of CRLF lines and one LF line (opened with 'fileformat' unix): the cursor
    before a line's ^M, at the line's end and before a ")" (which the item ends with)."""
    found = checks(session, "stray_cr")["stray_cr"]
    assert found["fileformat"] == "unix"
    first, second = found["takes"]
    for taken in (first, second):
        assert taken["before"][taken["cursor"][0] - 1].endswith("\r")
        assert_taken(taken, encoding_of(session))
    assert second["before"] == first["after"]
    # On disk: each line with the ending it had (the CRLF lines' "\r" kept), the
    # suggestions' lines with none.
    assert found["bytes_after"].split("\n") == ("\n".join(second["after"]) + "\n").split("\n")


def test_in_a_cr_only_file_a_suggestion_is_taken_and_written_with_cr(session):
    found = checks(session, "mac")["mac"]
    assert found["fileformat"] == "mac"
    item = found["answer"]["items"][0]["text"]
    assert re.search(r"[\r\n]", item), f"this test needs an item of several lines, got {item!r}"
    assert_taken(found, encoding_of(session))
    assert not any(re.search(r"[\r\n]", line) for line in found["after"])
    assert found["bytes_after"].split("\r") == (found["bytes_before"].removesuffix("\r") + breaks(item, "\r")
                                                + "\r").split("\r")


def test_keys_typed_ahead_of_the_server_never_take_a_suggestion_for_older_text(session):
    """A character and <Tab> typed in one go while a suggestion is shown: a character the
    suggestion does not go on with leaves it for older text, and <Tab> types blanks (the
    python ftplugin's expandtab); its own next character keeps it, and <Tab> takes it."""
    other, matching = checks(session, "typed_ahead")["typed_ahead"]
    for result in (other, matching):
        before, ghost = result["before"], result["ghost"]
        assert (ghost["row"], ghost["col"]) == (len(before) - 1, len(before[-1].encode()))
        assert result["answer"]["asked_line"] == before[-1]
    assert other["char"] != other["ghost"]["text"][0]
    assert other["visible_at_tab"] is False, "the suggestion for the text before the character held at <Tab>"
    assert other["after"][:-1] == other["before"][:-1]
    assert re.fullmatch(re.escape(other["before"][-1] + other["char"]) + r"[ \t]+", other["after"][-1]), other["after"]
    assert matching["char"] == matching["ghost"]["text"][0]
    assert matching["visible_at_tab"] is True, "typing the suggestion's next character dropped it"
    [item] = matching["answer"]["items"]
    assert matching["after"] == matching["before"][:-1] + lsp_lines(matching["before"][-1] + item["text"])


def test_a_macro_replayed_types_what_it_recorded_and_takes_no_suggestion_for_other_text(session):
    """qq A <Tab> <Esc> q while a suggestion was shown; @q on another line: its <Tab>
    comes before anything is asked there and types blanks, as does a macro that types
    text and <Tab> in one go (@w)."""
    found = checks(session, "macro")["macro"]
    assert_taken(found["recorded"], encoding_of(session))
    assert found["register"] == "A\t\x1b"
    typed = {"@q": "", "@w": "):"}
    for replay in found["replays"]:
        before, after = replay["before"], replay["after"]
        assert after[:-1] == before[:-1], replay["keys"]
        assert re.fullmatch(re.escape(before[-1] + typed[replay["keys"]]) + r"[ \t]+", after[-1]), (replay, after)


def test_after_a_paste_the_suggestion_is_shown_and_taken_at_the_cursor(session):
    found = checks(session, "paste")["paste"]
    pasted_lines = found["lines"][:-1] + found["block"].split("\n")  # the block put on the empty last line
    for name in ("put", "pasted"):
        assert found[name]["before"] == pasted_lines, name
        assert found[name]["cursor"] == [len(pasted_lines), len(pasted_lines[-1])], name
        assert_taken(found[name], encoding_of(session))


def test_undo_right_after_tab_gives_back_the_text_before_it_and_shows_nothing_for_the_old_text(session):
    nothing_typed, typed, ahead = checks(session, "undo")["undo"]
    assert typed["typed"] == ")" and ahead["ahead"] is True
    for result in (nothing_typed, typed):
        assert_taken(result, encoding_of(session))
        assert result["undone"] == result["before"]  # what was typed before <Tab> stays
        assert result["ghost_after_undo"] is None
    assert ahead["undone"] == ahead["before"]  # <Tab><C-o>u typed ahead
    for result in (nothing_typed, typed, ahead):
        # The next suggestion: for the text as `u` left it, at the cursor.
        again = result["again"]
        row, col = again["cursor"]
        assert again["lines"] == result["before"]
        assert again["answer"]["asked_line"] == again["lines"][row - 1]
        assert (again["ghost"]["row"], again["ghost"]["col"]) == (row - 1, col)


def test_closing_buffers_with_requests_in_flight_leaves_no_session_for_them(session):
    """The server keeps a session for each open document it completed in or warmed: one
    for each buffer still attached, and none for a closed one, whatever was in flight."""
    found = checks(session, "close")["close"]
    assert found["before"]["sessions"] == found["attached_before"] > 0
    delete, wipe = found["closes"]
    assert delete == {"inline": True, "loaded": False}  # :bdelete! with a suggestion's request in flight
    assert wipe == {"inline": True, "next_edit": True, "loaded": False}  # :bwipeout! with two
    assert found["attached_after"] == found["attached_before"]  # the two opened were closed
    assert found["after"]["sessions"] == found["attached_after"] and found["after"]["settled"], found["after"]
    every = found["all"]
    assert every["inline"] is True and every["attached"] == 0
    assert every["sessions"]["sessions"] == 0 and every["sessions"]["settled"], every["sessions"]


def test_a_buffer_closed_while_its_warm_waits_for_the_engine_leaves_no_session(session):
    """A completer/warm still waiting for the engine when its buffer is wiped out enters
    nothing: its document's session stays gone (it came back, 5 times in 6, when the warm
    entered its document with no cancel flag for the close to set)."""
    tries = checks(session, "close_warm")["close_warm"]
    assert len(tries) == 6 and all(attempt["unattached"] for attempt in tries)
    assert [attempt["sessions"] for attempt in tries] == [attempt["attached"] for attempt in tries], tries


def test_a_next_edit_shows_and_applies_only_in_its_buffer_and_only_for_its_version(session):
    found = checks(session, "next_edit_switch")["next_edit_switch"]
    edits = edits_of({"result": {"edits": found["answer"]}})
    assert {edit["textDocument"]["version"] for edit in edits} == {found["version"]}
    assert canonical(found["marks"]) == expected_marks(edits)
    away, back = found["away"], found["back"]
    # In other.py: nothing of it drawn; <Tab> in Normal mode is the user's own, <Tab> in
    # Insert mode types blanks; neither buffer gets the edit.
    assert away["other_marks"] == [] and away["other_marks_after"] == [] and away["visible_in_other"] is False
    assert away["user_tab"] == 1
    assert away["shapes_after"] == found["before"]
    other_before = found["other_before"]
    assert away["other_after"][:-1] == other_before[:-1]
    assert re.fullmatch(re.escape(other_before[-1]) + r"[ \t]+", away["other_after"][-1]), away["other_after"]
    # Back in shapes.py, unchanged: shown for its version, and applied there; or gone.
    assert back["lines"] == found["before"]
    if back["visible"]:
        assert back["version"] == found["version"] and back["marks"] == found["marks"]
        assert back["applied"] == applied(found["before"], edits)[0]
        assert back["undone"] == found["before"]
    else:
        assert back["marks"] == []


def test_a_next_edit_of_a_buffer_changed_while_the_user_was_away_is_neither_shown_nor_applied(session):
    found = checks(session, "next_edit_changed_away")["next_edit_changed_away"]
    edits = edits_of({"result": {"edits": found["answer"]}})
    assert {edit["textDocument"]["version"] for edit in edits} == {found["version"]}
    assert canonical(found["marks"]) == expected_marks(edits)
    assert found["version_changed"] != found["version"]
    assert found["gone"] and found["visible"] is False and found["marks_after"] == []
    assert found["after"] == found["before"]  # <Tab> twice: nothing applied
    assert found["user_tab"] == 2  # the user's own <Tab>, as with nothing shown


def test_the_session_raised_no_error(session):
    assert session["errmsg"] == ""
    assert session["notifications"] == []
    assert not re.search(r"E\d+:|Error|stack traceback", session["messages"]), session["messages"]

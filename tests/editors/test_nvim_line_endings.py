"""The Neovim plugin's ghost text and next edits (editor-extensions/nvim/lua/completer/)
in files whose lines end in "\\r\\n", in a real headless Neovim 0.11.4 against the real
server with the smol models: no mocks.

tests/editors/nvim/plugin_line_endings.lua takes a multi-line suggestion in a CRLF file (opened
with 'fileformat' dos) and in a file of CRLF lines and one LF line (opened with
'fileformat' unix, a "\\r" left at the end of the CRLF lines), writes the buffer back and
records the bytes on disk, with the items the server sent; and applies a next edit in a
CRLF file. The server sends the document's own line breaks when the model writes them:
the smol model, given CRLF lines, writes "\\r\\n" (an item's text is checked to hold one).
"""

import re

import pytest

from test_nvim_next_edit import applied, canonical, edits_of, expected_marks
from test_nvim_plugin import checks, run_nvim

pytestmark = pytest.mark.slow  # a real Neovim

BREAK = re.compile(r"\r\n|\r|\n")  # LSP's line breaks


@pytest.fixture(scope="module")
def session(smol, smol_cache, tmp_path_factory) -> dict:
    """One Neovim session through tests/editors/nvim/plugin_line_endings.lua."""
    answer = run_nvim("plugin_line_endings.lua", tmp_path_factory.mktemp("nvim-line-endings"), smol_cache,
                      timeout_s=300)
    assert "error" not in answer, answer.get("error")
    return answer


def breaks(text: str, eol: str) -> str:
    """`text` with each of its line breaks written as `eol`."""
    return BREAK.sub(eol, text)


def by_line(data: str) -> list[str]:
    """A file's bytes cut after each "\\n", any "\\r" kept: equal lists are equal bytes, and
    an assertion's diff names the line with a stray "\\r"."""
    return data.split("\n")


def crlf_item(found: dict) -> str:
    item = found["item"]
    assert "\r\n" in item, f"this test needs an item with the document's CRLF breaks, got {item!r}"
    return item


def test_a_suggestion_taken_in_a_dos_buffer_is_written_with_crlf_and_no_stray_cr(session):
    found = checks(session, "dos_accept")["dos_accept"]
    item = crlf_item(found)
    assert found["fileformat"] == "dos"
    assert by_line(found["after"]) == by_line(found["before"].removesuffix("\r\n") + breaks(item, "\r\n") + "\r\n")
    assert not any("\r" in line for line in found["lines"])
    assert found["ghost"] == breaks(item, "\n")  # shown as lines, no ^M


def piece(text: str, kind: str) -> str:
    """What accept-line / accept-word take, with any of LSP's line breaks: a line (at a
    line break, the next one), or a word with the blanks before it."""
    pattern = r"(?:\r\n|\r|\n)[^\r\n]*|[^\r\n]*" if kind == "line" else r"\s*\w+|\s*[^\w\s]+"
    return re.match(pattern, text, re.ASCII).group()


def test_a_suggestion_taken_a_line_and_a_word_at_a_time_in_a_dos_buffer_is_written_with_crlf(session):
    found = checks(session, "dos_partial")["dos_partial"]
    remaining = crlf_item(found)
    assert found["fileformat"] == "dos"
    kinds = {"<S-Tab>": "line", "<C-B>": "word"}
    taken, left = "", []
    for step in found["steps"]:
        part = piece(remaining, kinds[step["key"]])
        taken, remaining = taken + part, remaining[len(part):]
        left.append(remaining)
    assert "\r\n" in taken  # a line break was taken
    assert by_line(found["after"]) == by_line(found["before"].removesuffix("\r\n") + breaks(taken, "\r\n") + "\r\n")
    for step, remaining in zip(found["steps"], left, strict=True):
        assert not any("\r" in line for line in step["lines"]), step["key"]
        assert step["ghost"] == breaks(remaining, "\n"), step["key"]  # what is left stays shown, no ^M


def test_a_suggestion_taken_where_lines_end_in_a_stray_cr_adds_lines_without_one(session):
    """Neovim opens a file of CRLF lines and one LF line with 'fileformat' unix: the CRLF
    lines keep a "\\r" (^M) of their own. The suggestion's lines come without one."""
    found = checks(session, "mixed_accept")["mixed_accept"]
    item = crlf_item(found)
    assert found["fileformat"] == "unix"
    assert by_line(found["after"]) == by_line(found["before"].removesuffix("\n") + breaks(item, "\n") + "\n")
    assert found["ghost"] == breaks(item, "\n")


def test_a_next_edit_in_a_dos_buffer_is_drawn_and_written_without_stray_cr(session):
    found = checks(session, "dos_next_edit")["dos_next_edit"]
    edits = edits_of({"result": {"edits": found["edits"]}})
    assert any("\r\n" in edit["text"] for edit in edits), f"this test needs an edit with CRLF breaks, got {edits}"
    assert found["fileformat"] == "dos"
    lf_edits = [{**edit, "text": breaks(edit["text"], "\n")} for edit in edits]
    expected, _ = applied(found["before"], lf_edits)
    assert by_line(found["after"]) == by_line("\r\n".join(expected) + "\r\n")
    assert found["lines"] == expected
    assert canonical(found["marks"]) == expected_marks(lf_edits)  # its lines drawn without ^M


def test_the_session_raised_no_error(session):
    assert session["errmsg"] == ""
    assert session["notifications"] == []
    assert not re.search(r"E\d+:|Error|stack traceback", session["messages"]), session["messages"]

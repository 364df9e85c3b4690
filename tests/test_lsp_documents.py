"""Documents and positions: LSP line breaks and code units, for any text."""

from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types

from completer.lsp.documents import Document, characters, units

TEXT = st.text(alphabet=st.sampled_from(list("ab \t\n\r\x0c\u2028é中😀")), max_size=40)
ENCODING = st.sampled_from(["utf-8", "utf-16", "utf-32"])


@given(TEXT, ENCODING, st.data())
def test_offset_and_position_are_inverse_at_character_boundaries(text, encoding, data):
    document = Document("file:///a", text)
    offset = data.draw(st.integers(0, len(text)))
    if text[offset - 1 : offset + 1] == "\r\n":  # inside a line break: no position names it
        return
    position = document.position_at(offset, encoding)
    assert document.offset_at(position, encoding, strict=True) == offset


@given(TEXT, ENCODING, st.data())
def test_an_incremental_change_equals_editing_the_string(text, encoding, data):
    document = Document("file:///a", text)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    if "\r\n" in (text[start - 1 : start + 1], text[end - 1 : end + 1]):
        return
    inserted = data.draw(TEXT)
    change = types.TextDocumentContentChangePartial(
        types.Range(document.position_at(start, encoding), document.position_at(end, encoding)), inserted)
    document.apply(change, encoding)
    assert document.text == text[:start] + inserted + text[end:]


def test_lines_break_where_lsp_says_not_at_form_feeds_or_unicode_separators():
    document = Document("file:///a", "a\x0cb\u2028c\r\nd\re\nf")
    assert [document.offset_at(types.Position(line, 0), "utf-16") for line in range(4)] == [0, 7, 9, 11]
    assert document.position_at(len(document.text), "utf-16") == types.Position(3, 1)


def test_code_units_of_emoji_and_cjk():
    line = "x = '😀中'"
    assert (units(line, "utf-8"), units(line, "utf-16"), units(line, "utf-32")) == (13, 9, 8)
    assert characters(line, units("x = '😀", "utf-16"), "utf-16") == 6
    assert characters(line, 6, "utf-16") == 5  # inside the emoji's surrogate pair: before it
    document = Document("file:///a", line)
    assert document.offset_at(types.Position(0, 99), "utf-16") == len(line)  # clamped, as the protocol says

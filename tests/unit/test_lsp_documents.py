"""Documents and positions: LSP line breaks and code units, for any text."""

from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types

from completer.lsp.documents import LINE_END, Document, as_lf, characters, units

TEXT = st.text(alphabet=st.sampled_from(list("ab \t\n\r\x0c\u2028é中😀")), max_size=40)
ENCODING = st.sampled_from(["utf-8", "utf-16", "utf-32"])


def editor_position(text: str, offset: int, encoding: str) -> types.Position:
    """The LSP position of `offset` in `text` as an editor holds it, its own line breaks in it."""
    breaks = list(LINE_END.finditer(text, 0, offset))
    start = breaks[-1].end() if breaks else 0
    return types.Position(len(breaks), units(text[start:offset], encoding))


@given(TEXT, ENCODING, st.data())
def test_offset_and_position_are_inverse_at_character_boundaries(text, encoding, data):
    document = Document("file:///a", text)
    assert document.text == as_lf(text) and "\r" not in document.text
    offset = data.draw(st.integers(0, len(document.text)))
    position = document.position_at(offset, encoding)
    assert document.offset_at(position, encoding, strict=True) == offset


@given(TEXT, ENCODING, st.data())
def test_an_incremental_change_equals_editing_the_editors_string(text, encoding, data):
    """Also where the change joins a "\r" and a "\n" into one line break, or parts them:
    the document's lines are the editor's."""
    document = Document("file:///a", text)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    if "\r\n" in (text[start - 1 : start + 1], text[end - 1 : end + 1]):  # inside a line break: no position
        return
    inserted = data.draw(TEXT)
    change = types.TextDocumentContentChangePartial(
        types.Range(editor_position(text, start, encoding), editor_position(text, end, encoding)), inserted)
    document.apply(change, encoding)
    edited = text[:start] + inserted + text[end:]
    assert document.editor_text == edited and document.text == as_lf(edited)


@given(TEXT)
def test_answers_leave_in_the_documents_first_line_break(text):
    document = Document("file:///a", text)
    first = LINE_END.search(text)
    assert document.leaving("a\nb\n") == "a\nb\n".replace("\n", first.group() if first else "\n")


def test_a_lone_surrogate_is_read_as_one_replacement_character_and_positions_stay_the_editors():
    document = Document("file:///a", "x = '\ud800'\ny")
    assert document.text == "x = '\ufffd'\ny"
    change = types.TextDocumentContentChangePartial(types.Range(types.Position(0, 7), types.Position(0, 7)), "\udc00z")
    document.apply(change, "utf-16")
    assert document.text == "x = '\ufffd'\ufffdz\ny"
    assert document.offset_at(types.Position(1, 1), "utf-16") == len(document.text)


def test_lines_break_where_lsp_says_not_at_form_feeds_or_unicode_separators():
    document = Document("file:///a", "a\x0cb\u2028c\r\nd\re\nf")
    assert document.text == "a\x0cb\u2028c\nd\ne\nf"  # the form feed and separator stay inside their line
    assert [document.offset_at(types.Position(line, 0), "utf-16") for line in range(4)] == [0, 6, 8, 10]
    assert document.position_at(len(document.text), "utf-16") == types.Position(3, 1)


def test_code_units_of_emoji_and_cjk():
    line = "x = '😀中'"
    assert (units(line, "utf-8"), units(line, "utf-16"), units(line, "utf-32")) == (13, 9, 8)
    assert characters(line, units("x = '😀", "utf-16"), "utf-16") == 6
    assert characters(line, 6, "utf-16") == 5  # inside the emoji's surrogate pair: before it
    document = Document("file:///a", line)
    assert document.offset_at(types.Position(0, 99), "utf-16") == len(line)  # clamped, as the protocol says
    assert document.offset_at(types.Position(0, 99), "utf-16", strict=True) == len(line)  # strict for lines only

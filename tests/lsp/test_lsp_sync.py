"""Random sessions of didOpen, incremental didChange and inline completion requests
against the real server process: its copy of each document (`completer/document`) stays
equal to a reference model of the same edits, written here from the LSP specification
alone, and every answer is a valid one."""

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raw_lsp import RawServer

LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Multi-byte characters of every UTF-8 and UTF-16 length, and each kind of line break.
ALPHABET = st.sampled_from(["a", "b", " ", "(", "\n", "\r\n", "\r", "é", "中", "😀", "\t"])
TEXT = st.lists(ALPHABET, max_size=30).map("".join)
UNIT = {"utf-16": lambda ch: 2 if ord(ch) > 0xFFFF else 1, "utf-8": lambda ch: len(ch.encode())}


class Reference:
    """An open document as the specification describes it."""

    def __init__(self, text: str, encoding: str):
        self.text, self.unit = text, UNIT[encoding]

    def lines(self) -> list[tuple[int, str]]:
        """(offset, text) of each line, without its break."""
        starts = [0] + [m.end() for m in LINE_BREAK.finditer(self.text)]
        ends = [m.start() for m in LINE_BREAK.finditer(self.text)] + [len(self.text)]
        return [(start, self.text[start:end]) for start, end in zip(starts, ends)]

    def offset(self, line: int, character: int) -> int:
        """A position past a line's end means its end; past the last line, the document's."""
        lines = self.lines()
        if line >= len(lines):
            return len(self.text)
        start, text = lines[line]
        column = 0
        for index, ch in enumerate(text):
            if column >= character:
                return start + index
            column += self.unit(ch)
        return start + len(text)

    def boundaries(self, line: int) -> list[int]:
        """The character positions of `line` that fall between characters, and one past its end."""
        lines = self.lines()
        if line >= len(lines):
            return [0, 3]
        columns = [0, *itertools.accumulate(self.unit(ch) for ch in lines[line][1])]
        return columns + [columns[-1] + 2]


@st.composite
def sessions(draw):
    """An initial text, then edits and requests at positions drawn on the text as it is
    then (character boundaries, and some past the end of a line or the document)."""
    reference = Reference(draw(TEXT), "utf-16")
    initial = reference.text
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        def position():
            line = draw(st.integers(0, len(reference.lines())))  # one past the last line too
            return line, draw(st.sampled_from(reference.boundaries(line)))

        if draw(st.integers(0, 3)) == 0:
            steps.append(("complete", position()))
            continue
        start, end = sorted([position(), position()], key=lambda p: reference.offset(*p))
        text = draw(TEXT)
        steps.append(("change", start, end, text))
        a, b = reference.offset(*start), reference.offset(*end)
        reference.text = reference.text[:a] + text + reference.text[b:]
    return initial, steps


def lsp_position(position: tuple[int, int]) -> dict:
    return {"line": position[0], "character": position[1]}


@pytest.fixture(scope="module", params=["utf-16", "utf-8"])
def server(request, smol, smol_cache):
    """A server that negotiated the parameter's position encoding (utf-16: the client offered none)."""
    raw = RawServer({"COMPLETER_CACHE_DIR": str(smol_cache)})
    capabilities = {"general": {"positionEncodings": [request.param]}} if request.param != "utf-16" else {}
    answer = raw.initialize({"models": {"preset": "smol"}, "generation": {"max_tokens": 4, "time_budget_ms": 0}},
                            capabilities)
    assert answer["result"]["capabilities"].get("positionEncoding", "utf-16") == request.param
    raw.encoding = request.param
    raw.ids = itertools.count(2)
    raw.documents = itertools.count()
    yield raw
    raw.close()


def valid_inline_answer(response: dict, reference: Reference, cursor: tuple[int, int]) -> None:
    """An error exactly when the cursor's line is past the document's end; else nothing or
    items replacing the rest of the cursor's line from the cursor, a character past the
    line's end being its end (as the protocol says)."""
    lines = reference.lines()
    if cursor[0] >= len(lines):
        assert response.get("error", {}).get("code") == -32602, response
        return
    cursor = (cursor[0], min(cursor[1], sum(map(reference.unit, lines[cursor[0]][1]))))
    result = response["result"]
    if result is None:
        return
    for item in result["items"]:
        assert isinstance(item["insertText"], str) and item["insertText"]
        start, end = item["range"]["start"], item["range"]["end"]
        assert start == lsp_position(cursor) and end["line"] == cursor[0]
        assert item["command"]["command"] == "completer.accept"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(session=sessions())
def test_the_servers_documents_follow_every_edit_and_every_answer_is_valid(server, session):
    initial, steps = session
    uri = f"file:///project/module_{next(server.documents)}.py"
    reference = Reference(initial, server.encoding)
    server.send({"method": "textDocument/didOpen",
                 "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 0, "text": initial}}})
    current = 0
    for version, step in enumerate(steps, start=1):
        if step[0] == "change":
            current = version
            _, start, end, text = step
            # Positions were drawn in UTF-16 units; in UTF-8 the same places have other columns.
            start, end = (convert(reference, p, server.encoding) for p in (start, end))
            server.send({"method": "textDocument/didChange", "params": {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"range": {"start": lsp_position(start), "end": lsp_position(end)},
                                    "text": text}]}})
            a, b = reference.offset(*start), reference.offset(*end)
            reference.text = reference.text[:a] + text + reference.text[max(a, b):]
        else:
            cursor = convert(reference, step[1], server.encoding)
            response = server.request(next(server.ids), "textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": lsp_position(cursor), "context": {"triggerKind": 2}})
            valid_inline_answer(response, reference, cursor)
        held = server.request(next(server.ids), "completer/document", {"uri": uri})["result"]
        assert held == {"text": reference.text, "version": current}
    server.send({"method": "textDocument/didClose", "params": {"textDocument": {"uri": uri}}})
    assert server.request(next(server.ids), "completer/document", {"uri": uri})["result"] is None


def convert(reference: Reference, position: tuple[int, int], encoding: str) -> tuple[int, int]:
    """A position drawn in UTF-16 units, in `encoding`'s units: the same place in the line."""
    if encoding == "utf-16":
        return position
    line, character = position
    lines = reference.lines()
    if line >= len(lines):
        return position
    text, column, converted = lines[line][1], 0, 0
    for ch in text:
        if column >= character:
            return line, converted
        column += UNIT["utf-16"](ch)
        converted += UNIT[encoding](ch)
    return line, converted + (character - column)  # past the end stays past the end

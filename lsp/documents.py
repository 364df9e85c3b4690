"""Open documents as the editor holds them, and LSP positions in them.

LSP lines end at "\n", "\r\n" or "\r" (not at the form feeds and Unicode separators
str.splitlines also breaks on), and a position's character counts code units of the
negotiated encoding: UTF-16 by default, UTF-8 or UTF-32 when both sides offer it.
"""

import bisect
import re
from dataclasses import dataclass, field

from lsprotocol import types

from completer.errors import PositionError  # the one error for a cursor outside a document

LINE_END = re.compile(r"\r\n|\r|\n")
ENCODINGS = {"utf-8": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}
UNIT_BYTES = {"utf-8": 1, "utf-16": 2, "utf-32": 4}


def units(text: str, encoding: str) -> int:
    """`text`'s length in the encoding's code units."""
    return len(text) if encoding == "utf-32" else len(text.encode(ENCODINGS[encoding])) // UNIT_BYTES[encoding]


def characters(line: str, column: int, encoding: str) -> int:
    """Code points of `line` before `column` code units; a column inside a character
    counts that character out (the cursor cannot sit inside it)."""
    if encoding == "utf-32":
        return min(column, len(line))
    data = line.encode(ENCODINGS[encoding])[: column * UNIT_BYTES[encoding]]
    return len(data.decode(ENCODINGS[encoding], errors="ignore"))


@dataclass
class Document:
    uri: str
    text: str
    version: int = 0
    language: str = ""
    _line_starts: list[int] | None = field(default=None, repr=False)  # offsets; computed when first needed

    @property
    def line_starts(self) -> list[int]:
        if self._line_starts is None:
            self._line_starts = [0] + [match.end() for match in LINE_END.finditer(self.text)]
        return self._line_starts

    def _line(self, number: int) -> str:
        starts = self.line_starts
        end = starts[number + 1] if number + 1 < len(starts) else len(self.text)
        return self.text[starts[number] : end].rstrip("\r\n")

    def offset_at(self, position: types.Position, encoding: str, strict: bool = False) -> int:
        """The offset (in code points) of an LSP position. Out of range, it is clamped
        to the line's or the document's end, as the protocol says; with `strict`, a
        PositionError instead."""
        starts = self.line_starts
        if position.line >= len(starts):
            if strict:
                raise PositionError(f"line {position.line} is outside the document ({len(starts)} lines)")
            return len(self.text)
        line = self._line(position.line)
        if strict and position.character > units(line, encoding):
            raise PositionError(f"character {position.character} is outside line {position.line} "
                                f"({units(line, encoding)} {encoding} code units)")
        return starts[position.line] + characters(line, position.character, encoding)

    def position_at(self, offset: int, encoding: str) -> types.Position:
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return types.Position(line, units(self.text[self.line_starts[line] : offset], encoding))

    def line_end_at(self, offset: int) -> int:
        """The offset where the text of the line holding `offset` ends (before its line break)."""
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return self.line_starts[line] + len(self._line(line))

    def apply(self, change: types.TextDocumentContentChangeEvent, encoding: str) -> tuple[int, int] | None:
        """The change made; the offsets of the text it replaced, None when it replaced all."""
        if isinstance(change, types.TextDocumentContentChangePartial):
            start = self.offset_at(change.range.start, encoding)
            end = max(start, self.offset_at(change.range.end, encoding))
            self.text = self.text[:start] + change.text + self.text[end:]
            replaced = (start, end)
        else:
            self.text = change.text
            replaced = None
        self._line_starts = None
        return replaced

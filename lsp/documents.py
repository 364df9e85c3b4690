"""Open documents as the editor holds them, and LSP positions in them.

LSP lines end at "\n", "\r\n" or "\r" (not at the form feeds and Unicode separators
str.splitlines also breaks on), and a position's character counts code units of the
negotiated encoding: UTF-16 by default, UTF-8 or UTF-32 when both sides offer it.

Text enters the server here with its line breaks made "\n" (positions count lines, so
they stay the same), and answers leave in the document's own break (`Document.eol`):
everything in between (prompts, the forward cache, the prefetch, next edits' regions)
sees one kind of line break, whatever the file and whatever an editor inserts.
"""

import bisect
import logging
import re
from dataclasses import dataclass, field

from lsprotocol import types

from completer.errors import PositionError  # the one error for a cursor outside a document
from completer.prompt import ContextFile
from completer.requests import CancelFlag

LINE_END = re.compile(r"\r\n|\r|\n")
# A UTF-16 surrogate on its own: JSON can carry one ("\ud800"), and no encoding can, so
# counting code units would fail on it. It becomes U+FFFD, one code unit as it was.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")

log = logging.getLogger(__name__)
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


def as_lf(text: str) -> str:
    """`text` with every line break "\n"."""
    return LINE_END.sub("\n", text)


def line_break_of(text: str) -> str:
    """The line break `text` uses first ("\n" when it has none)."""
    found = LINE_END.search(text)
    return found.group() if found else "\n"


@dataclass
class Document:
    """An open document. Its text is kept twice: as the editor holds it (`editor_text`,
    where the editor's changes apply, so that line breaks they join or split count as
    the editor counts them) and with every line break "\n" (`text`, what everything
    else reads). Both have the same lines, so a position means the same in each."""

    uri: str
    editor_text: str
    version: int = 0
    language: str = ""
    eol: str = ""  # the line break the editor's text uses (its first): what answers are written in
    # Set by didClose: every request made in this opening of the document carries it
    # (CompletionRequest.closed), and the work for them stops, however late it starts.
    closed: CancelFlag = field(default_factory=CancelFlag, repr=False, compare=False)
    # The prompt of the last completion decoded for it and the other files it showed
    # (Completion.prompt, Completion.context): what protocol.PROMPT answers.
    last_prompt: tuple[list[int] | str, tuple[ContextFile, ...]] | None = field(default=None, repr=False,
                                                                               compare=False)
    _text: str | None = field(default=None, repr=False)  # computed when first needed, as the line starts
    _line_starts: list[int] | None = field(default=None, repr=False)
    _editor_line_starts: list[int] | None = field(default=None, repr=False)
    _told_of_surrogates: bool = field(default=False, repr=False)

    def __post_init__(self):
        self.editor_text = self._without_surrogates(self.editor_text)
        self.eol = self.eol or line_break_of(self.editor_text)

    def _without_surrogates(self, text: str) -> str:
        if LONE_SURROGATE.search(text) is None:
            return text
        if not self._told_of_surrogates:
            log.warning("%s holds a lone UTF-16 surrogate: the server reads it as U+FFFD", self.uri)
            self._told_of_surrogates = True
        return LONE_SURROGATE.sub("\ufffd", text)

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = as_lf(self.editor_text)
        return self._text

    def leaving(self, text: str) -> str:
        """An answer's text in the document's line break."""
        return text.replace("\n", self.eol) if self.eol != "\n" else text

    @property
    def line_starts(self) -> list[int]:
        if self._line_starts is None:
            self._line_starts = [0] + [match.end() for match in LINE_END.finditer(self.text)]
        return self._line_starts

    def _line(self, number: int) -> str:
        starts = self.line_starts
        end = starts[number + 1] if number + 1 < len(starts) else len(self.text)
        return self.text[starts[number] : end].removesuffix("\n")

    def offset_at(self, position: types.Position, encoding: str, strict: bool = False) -> int:
        """The offset (in code points) in `text` of an LSP position. A character past its
        line's end is its line's end, as the protocol says (an editor that counts a line's
        stray "\r" as a character puts the cursor after it); a line past the document's end
        is the document's end, or with `strict` a PositionError."""
        starts = self.line_starts
        if position.line >= len(starts):
            if strict:
                raise PositionError(f"line {position.line} is outside the document ({len(starts)} lines)")
            return len(self.text)
        return starts[position.line] + characters(self._line(position.line), position.character, encoding)

    def _editor_offset_at(self, position: types.Position, encoding: str) -> int:
        """offset_at, in `editor_text`."""
        if self._editor_line_starts is None:
            self._editor_line_starts = [0] + [match.end() for match in LINE_END.finditer(self.editor_text)]
        starts = self._editor_line_starts
        if position.line >= len(starts):
            return len(self.editor_text)
        return starts[position.line] + characters(self._line(position.line), position.character, encoding)

    def position_at(self, offset: int, encoding: str) -> types.Position:
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return types.Position(line, units(self.text[self.line_starts[line] : offset], encoding))

    def line_end_at(self, offset: int) -> int:
        """The offset where the text of the line holding `offset` ends (before its line break)."""
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return self.line_starts[line] + len(self._line(line))

    def apply(self, change: types.TextDocumentContentChangeEvent, encoding: str) -> tuple[int, int] | None:
        """The change made; the offsets in `text` of the text it replaced, None when it
        replaced all."""
        inserted = self._without_surrogates(change.text)
        if isinstance(change, types.TextDocumentContentChangePartial):
            if LINE_END.search(self.editor_text) is None:  # no line break yet: the first one typed says which
                self.eol = line_break_of(inserted)
            start = self.offset_at(change.range.start, encoding)
            replaced = (start, max(start, self.offset_at(change.range.end, encoding)))
            editor_start = self._editor_offset_at(change.range.start, encoding)
            editor_end = max(editor_start, self._editor_offset_at(change.range.end, encoding))
            self.editor_text = self.editor_text[:editor_start] + inserted + self.editor_text[editor_end:]
        else:
            self.eol = line_break_of(inserted)
            self.editor_text = inserted
            replaced = None
        self._text = self._line_starts = self._editor_line_starts = None
        return replaced

"""The forward cache: the completion last shown in a document, whose rest is the answer
while the user types what it starts with."""

import re
from dataclasses import dataclass

from completer.editor.postprocess import CursorContext, postprocess


@dataclass(frozen=True)
class Shown:
    """A candidate as it was shown: the model's text and what post-processing made of it."""

    generated: str  # the model's text, before post-processing
    shown: str
    timed_out: bool = False  # the generation ran out of time: its last line is half-written


@dataclass
class ForwardCache:
    """The completion last shown in a document, and its other candidates. When the user
    types what one starts with, the rest of the model's text is the answer, with no
    model call. It is also the better answer: the model wrote it whole, not from a
    prompt cut inside one of its tokens. The rest is post-processed again for the cursor
    as it is now: typing can move it mid-line (an editor auto-closing a bracket), where
    one line is shown, without what already follows the cursor. The lines below the
    cursor's must be as they were: the completion was written for them (its prompt's
    suffix, its scope's end), and a line pasted there may be the one it would repeat."""

    text_before: str = ""  # the document's text before the cursor when it was shown
    below: str = ""  # the document's text from the end of the cursor's line then
    candidates: tuple[Shown, ...] = ()  # the completion first

    def remember(self, text: str, cursor: int, candidates: tuple[Shown, ...]) -> None:
        self.text_before, self.below, self.candidates = text[:cursor], lines_below(text, cursor), candidates

    def lookup(self, text: str, cursor: int, context: CursorContext) -> list[str]:
        """What post-processing shows at `context` of each candidate's model text after
        what the user typed, for the candidates that the text before the cursor is the old
        one plus a start of (the first one such first), without empty answers or repeats;
        none when the lines below the cursor's changed."""
        text_before = text[:cursor]
        if not text_before.startswith(self.text_before) or lines_below(text, cursor) != self.below:
            return []
        typed = text_before[len(self.text_before) :]
        rests = [postprocess(c.generated[len(typed) :], context, timed_out=c.timed_out) for c in self.candidates
                 if c.shown.startswith(typed) and typed != c.shown]
        return distinct(rests)


# A line break as LSP counts them.
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def lines_below(text: str, cursor: int) -> str:
    """`text` from the line break that ends the cursor's line: what typing the shown
    completion (even with an editor closing a bracket after the cursor) leaves as it is."""
    found = LINE_BREAK.search(text, cursor)
    return text[found.start():] if found else ""


def distinct(texts: list[str]) -> list[str]:
    """`texts` without empty ones and repeats, in order."""
    return list(dict.fromkeys(text for text in texts if text))

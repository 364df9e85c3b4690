"""The forward cache: the completion last shown in a document, whose rest is the answer
while the user types what it starts with."""

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
    one line is shown, without what already follows the cursor."""

    text_before: str = ""  # the document's text before the cursor when it was shown
    candidates: tuple[Shown, ...] = ()  # the completion first

    def remember(self, text_before: str, candidates: tuple[Shown, ...]) -> None:
        self.text_before, self.candidates = text_before, candidates

    def lookup(self, text_before: str, cursor: CursorContext) -> list[str]:
        """What post-processing shows at `cursor` of each candidate's model text after what
        the user typed, for the candidates that the text before the cursor is the old one
        plus a start of (the first one such first), without empty answers or repeats."""
        if not text_before.startswith(self.text_before):
            return []
        typed = text_before[len(self.text_before) :]
        rests = [postprocess(c.generated[len(typed) :], cursor, timed_out=c.timed_out) for c in self.candidates
                 if c.shown.startswith(typed) and typed != c.shown]
        return distinct(rests)


def distinct(texts: list[str]) -> list[str]:
    """`texts` without empty ones and repeats, in order."""
    return list(dict.fromkeys(text for text in texts if text))

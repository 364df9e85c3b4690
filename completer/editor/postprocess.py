"""What of a generated text is worth showing: small pure functions on strings.

    mid-line cursor          -> one line, without what already follows the cursor
    cursor at a line's end   -> lines up to the end of the cursor's indentation scope
    then: cut where the text starts repeating the file's next line, at stop strings,
    at the last line end when the time budget ran out, and trailing whitespace.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class CursorContext:
    line_before: str  # the cursor's line up to the cursor
    suffix: str  # the file's text after the cursor

    @property
    def line_after(self) -> str:
        return self.suffix.split("\n", 1)[0]

    @property
    def single_line(self) -> bool:
        """Mid-line (code follows the cursor on its line): complete that line only."""
        return bool(self.line_after.strip())

    @property
    def indent(self) -> int:
        """The cursor line's indentation: where its scope starts."""
        return indentation(self.line_before)

    @property
    def next_line(self) -> str:
        """The first non-blank line after the cursor's, stripped; "" if none."""
        rest = self.suffix.split("\n", 1)[1] if "\n" in self.suffix else ""
        return next((line.strip() for line in rest.split("\n") if line.strip()), "")


def indentation(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def cut_to_scope(text: str, context: CursorContext) -> str:
    """Keep lines while they stay inside the scope being written: indented at least as
    the cursor line (deeper when that line opens a block), and not a new statement at
    the cursor line's level after a blank line (the next function, class or block)."""
    opens_block = context.line_before.rstrip().endswith((":", "{", "(", "["))
    least = context.indent + (1 if opens_block else 0)
    lines = text.split("\n")
    kept = [lines[0]]
    blank_before = False
    for line in lines[1:]:
        if line.strip() and (indentation(line) < least or (blank_before and indentation(line) <= context.indent)):
            break
        blank_before = not line.strip()
        kept.append(line)
    return "\n".join(kept)


def cut_suffix_repeat(text: str, context: CursorContext) -> str:
    """Stop before a line that repeats the file's next line: the model is re-typing
    code that is already there."""
    if not context.next_line:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() == context.next_line:
            return "\n".join(lines[:i])
    return text


def postprocess(text: str, context: CursorContext, stop: tuple[str, ...] = (), timed_out: bool = False) -> str:
    if context.single_line:
        text = text.split("\n", 1)[0]
        rest = context.line_after.strip()
        if text.rstrip().endswith(rest):  # e.g. the model closed a bracket that is already there
            text = text.rstrip()[: -len(rest)]
    else:
        text = cut_suffix_repeat(cut_to_scope(text, context), context)
    for s in stop:
        if s and s in text:
            text = text[: text.index(s)]
    if timed_out and "\n" in text:
        text = text[: text.rindex("\n")]  # a half-written last line is not shown
    return text.rstrip()


def stops_for(context: CursorContext) -> tuple[str, ...]:
    """Strings at which generation can stop early: a single-line completion ends at its newline."""
    return ("\n",) if context.single_line else ()

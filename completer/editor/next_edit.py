"""Next-edit suggestions, the text side: the editable region around the cursor that a
model rewrites, and the edits that turn the region into its rewrite.

A next-edit model is given the region (the cursor marked in it) and writes the region
again as it should be after the user's next edit. Most of a rewrite is a copy of the
region, so the answer is the difference: a few edits (a range of the document and its
new text each), which may lie away from the cursor. A rewrite equal to the region is no
edit, the common answer.
"""

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from completer.prompt import ContextFile, Segment
from completer.requests import TextEdit

# A line and its break, as LSP counts lines (\n, \r\n or \r; not str.splitlines's others).
LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


@dataclass(frozen=True)
class Region:
    """Whole lines of a document around the cursor."""

    start: int  # the document offset of the region's first character
    text: str  # the lines, each with its line break (the last one's, if the document has it)
    cursor: int  # the cursor's offset in `text`

    @property
    def end(self) -> int:
        return self.start + len(self.text)


def editable_region(text: str, cursor: int, lines_above: int, lines_below: int) -> Region:
    """The cursor's line with up to `lines_above` lines before it and `lines_below` after."""
    lines = _lines(text)
    if not lines or lines[-1].endswith(("\n", "\r")):
        lines.append("")  # the empty line after a final line break, where a cursor may be
    offsets = _offsets(lines)
    row = max(i for i in range(len(lines)) if offsets[i] <= cursor)
    first, last = max(0, row - lines_above), min(len(lines) - 1, row + lines_below)
    start = offsets[first]
    return Region(start, text[start:offsets[last + 1]], cursor - start)


def edits_between(region: Region, rewrite: str) -> list[TextEdit]:
    """The edits, in document offsets and in order, that make the region's text `rewrite`:
    the lines that differ (difflib's matching; a block of lines replaced by as many is
    taken line by line), each change narrowed to the characters that differ, so that
    renaming a word is an edit of that word."""
    old_lines, new_lines = _lines(region.text), _lines(rewrite)
    old_at, new_at = _offsets(old_lines), _offsets(new_lines)
    changed = []  # (old start, old end, new start, new end), in lines
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "replace" and i2 - i1 == j2 - j1:
            changed += [(i, i + 1, j, j + 1) for i, j in zip(range(i1, i2), range(j1, j2))
                        if old_lines[i] != new_lines[j]]
        elif tag != "equal":
            changed.append((i1, i2, j1, j2))
    edits = []
    for i1, i2, j1, j2 in changed:
        old, new = region.text[old_at[i1]:old_at[i2]], rewrite[new_at[j1]:new_at[j2]]
        head = _common_prefix(old, new)
        tail = _common_prefix(old[head:][::-1], new[head:][::-1])
        edits.append(TextEdit(region.start + old_at[i1] + head, region.start + old_at[i2] - tail,
                              new[head:len(new) - tail]))
    return edits


def rewrite_end(output: str, ends: tuple[str, ...], region_text: str, cursor_marker: str = "") -> int | None:
    """Where the rewrite in a model's `output` ends, or None while it goes on: at the first
    of the format's `ends` that starts a line (the format writes it after the region's
    last line; anywhere in the line for a region without a final line break), unless
    that is a line of the region the model is still copying: one that starts with an end
    too (an XML file's `</region>`, a `</s>` in HTML), where the rewrite so far, aligned
    with the region line by line, has not come to it. So text the document holds is
    never taken for the end of its rewrite. The rewrite and the region are aligned
    without the format's `cursor_marker`, which the model may echo."""
    anywhere = not region_text.endswith(("\n", "\r"))
    region_lines = _lines(region_text)
    compared = [line.replace(cursor_marker, "") for line in region_lines] if cursor_marker else region_lines
    own = [i for i, line in enumerate(region_lines)
           if (any(end in line for end in ends) if anywhere else line.startswith(ends))]
    for found in re.finditer("|".join(map(re.escape, ends)), output):
        at = found.start()
        before = output[:at].removesuffix(cursor_marker) if cursor_marker else output[:at]
        if not anywhere and before and before[-1] not in "\n\r":  # an echoed cursor may come just before
            continue
        if own:
            written = _lines(output[:at].replace(cursor_marker, "") if cursor_marker else output[:at])
            matcher = difflib.SequenceMatcher(None, compared, written, autojunk=False)
            copied = max((block.a + block.size - 1 for block in matcher.get_matching_blocks() if block.size),
                         default=-1)
            if any(line > copied for line in own):
                continue
        return at
    return None


def engine_stops(ends: tuple[str, ...], region_text: str) -> list[str]:
    """The ends a decoder may stop at wherever they appear (its stop strings): those the
    region does not hold. The others end a rewrite only as rewrite_end finds."""
    return [end for end in ends if end not in region_text]


def suggested_rewrite(edit_format: "EditFormat", output: str, stopped: bool, ended: bool, ends: tuple[str, ...],
                      region_text: str) -> str | None:
    """The region's new text in a model's `output` (cut where rewrite_end finds its end;
    `stopped`: decoding already cut it at a stop string; `ended`: by an end-of-generation
    token); None when the output is not a whole rewrite."""
    end = rewrite_end(output, ends, region_text, edit_format.cursor_marker)
    whole = end is not None or stopped or (ended and edit_format.ends_with_end_token)
    return region_rewrite(edit_format, output[:end] if end is not None else output, whole, region_text)


def without_echoed(marker: str, output: str, region_text: str) -> str:
    """`output` without the `marker`s the model echoed from the prompt (its cursor, which
    may even fall inside a marker's spelling the region holds): one at a time, while
    taking one out leaves the output more like the region (taking out one the region
    holds leaves it less so)."""
    def likeness(text: str) -> float:
        return difflib.SequenceMatcher(None, text, region_text, autojunk=False).ratio()
    while True:
        cuts = [output[:found.start()] + output[found.end():] for found in re.finditer(re.escape(marker), output)]
        best = max(cuts, key=likeness, default=output)
        if likeness(best) <= likeness(output):
            return output
        output = best


def region_rewrite(edit_format: "EditFormat", output: str, whole: bool, region_text: str) -> str | None:
    """The region's new text in a model's answer (`whole`: it ended as the format ends a
    rewrite), ending as the region does; None when the answer is not a whole rewrite, or
    empties a region that has text: a small model closing the region at once (smol did
    on 10 of 12 edits from a repository's history), not an edit a user makes next."""
    rewrite = edit_format.rewrite(output, whole, region_text)
    if rewrite is None or (not rewrite.strip() and region_text.strip()):
        return None
    return with_ending_of(rewrite, region_text)


def with_ending_of(rewrite: str, original: str) -> str:
    """`rewrite` ending in the line breaks `original` ends in: a model's blank lines before
    it closes the region are its layout, not an edit."""
    return rewrite.rstrip("\r\n") + original[len(original.rstrip("\r\n")):]


def apply_edits(text: str, edits: list[TextEdit]) -> str:
    """`text` with `edits` (in order, not overlapping) made."""
    pieces, at = [], 0
    for edit in edits:
        pieces += [text[at:edit.start], edit.text]
        at = edit.end
    return "".join(pieces) + text[at:]


def spanning_edit(text: str, edits: list[TextEdit]) -> TextEdit:
    """One edit of `text` that makes all of `edits` (in order, not overlapping): from the
    first one's start to the last one's end, the text between them kept. For clients that
    apply an answer's first edit only, as Copilot's do (it answers one edit a suggestion)."""
    start, end = edits[0].start, edits[-1].end
    inside = [TextEdit(edit.start - start, edit.end - start, edit.text) for edit in edits]
    return TextEdit(start, end, apply_edits(text[start:end], inside))


def _lines(text: str) -> list[str]:
    return LINE.findall(text)


def _offsets(lines: list[str]) -> list[int]:
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    return offsets


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class EditEvent:
    """A stretch of changes the user made to one document: its text before and after."""

    document: str
    path: str
    before: str
    after: str

    @cached_property
    def diff(self) -> str:
        return unified_diff(self.before, self.after)


def unified_diff(before: str, after: str) -> str:
    """The change as hunks of a unified diff with 3 lines of context and no file headers
    (`@@ -a,b +c,d @@` then ` `, `-` and `+` lines), as Zed writes its edit events."""
    lines = difflib.unified_diff(_lines(before), _lines(after), n=3, lineterm="")
    body = [line if line.endswith(("\n", "\r")) else line + "\n" for line in list(lines)[2:]]
    return "".join(body)


@dataclass(frozen=True)
class EditPrompt:
    """A rendered next-edit prompt: its segments (each control token a special segment of
    its own, so that a document's text that spells one, such as this file's, stays text),
    the text a rewrite of the region copies (what copy drafting proposes from), and the
    strings that end the rewrite where the format writes them (rewrite_end)."""

    segments: tuple[Segment, ...]
    copy: str
    ends: tuple[str, ...]

    @cached_property
    def text(self) -> str:
        return "".join(segment.text for segment in self.segments)


class Theirs(str):
    """A document's or the user's text in a next-edit prompt (file text, paths, diffs),
    which a server given the prompt as text has special tokens taken out of."""


def segments_of(*parts: str | Segment) -> tuple[Segment, ...]:
    """A prompt's segments: each Theirs part as text, each other string as the format's
    own (markup), each Segment as it is."""
    return tuple(part if isinstance(part, Segment) else Segment(part, markup=not isinstance(part, Theirs))
                 for part in parts if part)


def joined(separator: str, blocks: list[list[str | Segment]]) -> list[str | Segment]:
    """The blocks' parts, `separator` (the format's) between blocks."""
    return [part for i, block in enumerate(blocks) for part in ([separator] if i else []) + block]


class EditFormat:
    """One next-edit model family's prompt, and how its answer gives the region's new text."""

    family: str = ""
    # The model ends a whole rewrite with its end-of-generation token too (else only a
    # stop string ends one; at an end token the answer was cut short).
    ends_with_end_token: bool = False
    # The prompt shows other files' chunks (the model was trained with them).
    reads_chunks: bool = False
    # The text that marks the cursor in the region the prompt shows ("" for none).
    cursor_marker: str = ""

    def prompt(self, path: str, before: str, region: Region, after: str, events: list[EditEvent],
               chunks: tuple[ContextFile, ...] = ()) -> EditPrompt:
        """`before` and `after`: the file's text around the region; `events`: the recent
        edits, oldest first; `chunks`: of other files (the inline prompt's), oldest
        first, for the formats whose model reads them."""
        raise NotImplementedError

    def rewrite(self, output: str, stopped: bool, region_text: str) -> str | None:
        """The region's new text in the model's answer (cut where the rewrite ends); None
        when the answer is not a whole region (cut by the token limit, or not in the
        format). What the region itself holds stays, markers and fences alike."""
        raise NotImplementedError


class InstructionFormat(EditFormat):
    """Any instruct model (the `smol` pair in tests): the recent edits, the file, then the
    region between plain-text tags with the cursor marked, and the model asked to write
    it again after the user's next edit; the answer starts inside a second opening tag.
    Kept this short because SmolLM2-135M-Instruct closed its rewrite with the tag after
    this prompt, and ran on past the region after longer instructions. Other files'
    chunks come first, each as the file is shown, the stablest part of the prompt first."""

    family = "instruction"
    reads_chunks = True
    OPEN, CLOSE, CURSOR = "<region>\n", "</region>", "<cursor>"
    cursor_marker = CURSOR

    def prompt(self, path: str, before: str, region: Region, after: str, events: list[EditEvent],
               chunks: tuple[ContextFile, ...] = ()) -> EditPrompt:
        files = [["The file ", Theirs(chunk.path), ":\n", Theirs(chunk.text.rstrip("\n")), "\n\n"] for chunk in chunks]
        history = [["User edited ", Theirs(event.path), ":\n", Theirs(event.diff)] for event in events]
        segments = segments_of(
            *joined("", files + history), "\nThe file ", Theirs(path), ":\n", Theirs(before + region.text + after),
            f"\nRewrite the region with the user's next edit near {self.CURSOR}.\n{self.OPEN}",
            Theirs(region.text[:region.cursor]), self.CURSOR, Theirs(region.text[region.cursor:]),
            f"{self.CLOSE}\n\n{self.OPEN}")
        # A second opening tag ends a rewrite too: a small model goes on to another region.
        return EditPrompt(segments, region.text + self.CLOSE, (self.CLOSE, self.OPEN))

    def rewrite(self, output: str, stopped: bool, region_text: str) -> str | None:
        return without_echoed(self.CURSOR, output, region_text) if stopped else None


class ZetaFormat(EditFormat):
    """Zed's Zeta (zed-industries/zeta, a Qwen2.5-Coder-7B fine-tune), as Zed's own client
    writes it: zed-industries/zed crates/zeta/src/zeta1.rs (the instruction, "User
    edited" events with unified diffs, oldest first) and crates/zeta/src/zeta1/
    input_excerpt.rs (the excerpt: a fence naming the file, `<|start_of_file|>` when it
    opens the file, the region between its markers with the cursor marked; the region
    ends before its last line break, which starts the text after it). The model answers
    with the region between the same markers; the markers are text, not control tokens.
    No other files' chunks: zeta1's prompt has none, so Zeta never saw them."""

    family = "zeta"
    START, END, CURSOR, FILE_START = ("<|editable_region_start|>", "<|editable_region_end|>",
                                      "<|user_cursor_is_here|>", "<|start_of_file|>")
    cursor_marker = CURSOR
    INSTRUCTION = ("### Instruction:\nYou are a code completion assistant and your task is to analyze user edits and "
                   "then rewrite an excerpt that the user provides, suggesting the appropriate edits within the "
                   "excerpt, taking into account the cursor location.\n\n### User Edits:\n\n")

    def prompt(self, path: str, before: str, region: Region, after: str, events: list[EditEvent],
               chunks: tuple[ContextFile, ...] = ()) -> EditPrompt:
        body, break_ = _without_last_break(region.text)
        cursor = min(region.cursor, len(body))
        start_of_file = f"{self.FILE_START}\n" if region.start - len(before) == 0 else ""
        history = [["User edited ", Theirs(event.path), ":\n```diff\n", Theirs(event.diff), "```"] for event in events]
        segments = segments_of(
            self.INSTRUCTION, *joined("\n\n", history), "\n\n### User Excerpt:\n\n```", Theirs(path), "\n",
            start_of_file, Theirs(before), f"{self.START}\n", Theirs(body[:cursor]), self.CURSOR, Theirs(body[cursor:]),
            f"\n{self.END}", Theirs(break_ + after), "\n```\n\n### Response:\n")
        return EditPrompt(segments, f"{self.START}\n{body}\n{self.END}", (self.END,))

    def rewrite(self, output: str, stopped: bool, region_text: str) -> str | None:
        if not stopped or not output.startswith(f"{self.START}\n"):
            return None
        return without_echoed(self.CURSOR, output[len(self.START) + 1:], region_text)


class SweepFormat(EditFormat):
    """Sweep's next-edit model (sweepai/sweep-next-edit-1.5B, Qwen2.5-Coder based), as
    Sweep's own Neovim plugin writes its prompt (sweepai/cursortab.nvim,
    server/provider/sweep/sweep.go): each recent edit as a `<|file_sep|>{path}.diff`
    block of its changed lines (`original:` then `updated:`), then the region as it was
    before the file's latest edit (`original/`), as it is (`current/`), and the model
    writes it again after `updated/`. No cursor marker, no text around the region (the
    plugin sends none). Other files' chunks come first, each as `<|file_sep|>{path}` and
    its text: Sweep's plugins send none, but that is Qwen2.5-Coder's repository format,
    which Sweep's model card for its v2 puts before the edits' diffs in the same place.
    `<|file_sep|>` is the vocabulary's control token, and ends the answer as an
    end-of-generation token: the pinned llama.cpp's src/llama-vocab.cpp takes it as the
    FIM separator and adds that to the end tokens. The plugin stops at `</s>` too."""

    family = "sweep"
    SEPARATOR = "<|file_sep|>"
    ends_with_end_token = True
    reads_chunks = True

    def prompt(self, path: str, before: str, region: Region, after: str, events: list[EditEvent],
               chunks: tuple[ContextFile, ...] = ()) -> EditPrompt:
        current, _ = _without_last_break(region.text)
        latest = next((event for event in reversed(events) if event.path == path), None)
        original = (_lines_before_edit(latest, region) if latest is not None else None) or current
        separator = Segment(self.SEPARATOR, special=True)
        blocks = [[separator, Theirs(f"{chunk.path}\n{_without_last_break(chunk.text)[0]}"), "\n"] for chunk in chunks]
        blocks += [[separator, Theirs(event.path), ".diff\noriginal:\n", Theirs(old), "\nupdated:\n", Theirs(new), "\n"]
                   for event in events for old, new in [_changed_lines(event.before, event.after)]]
        blocks += [[separator, "original/", Theirs(path), "\n", Theirs(original), "\n"],
                   [separator, "current/", Theirs(path), "\n", Theirs(current), "\n"],
                   [separator, "updated/", Theirs(path), "\n"]]
        return EditPrompt(segments_of(*joined("", blocks)), region.text, (self.SEPARATOR, "</s>"))

    def rewrite(self, output: str, stopped: bool, region_text: str) -> str | None:
        return output if stopped else None


# Continue's system prompt for Instinct, word for word (continuedev/continue,
# core/nextEdit/constants.ts, INSTINCT_SYSTEM_PROMPT; Apache-2.0): the model was
# fine-tuned to answer after it.
INSTINCT_SYSTEM_PROMPT = (
    "You are Instinct, an intelligent next-edit predictor developed by Continue.dev. Your role as an AI "
    "assistant is to help developers complete their code tasks by predicting the next edit that they "
    "will make within the section of code marked by <|editable_region_start|> and "
    "<|editable_region_end|> tags.\n"
    "\n"
    "You have access to the following information to help you make informed suggestions:\n"
    "\n"
    '- Context: In the section marked "### Context", there are context items from potentially relevant '
    "files in the developer's codebase. Each context item consists of a <|context_file|> marker, the "
    "filepath, a <|snippet|> marker, and then some content from that file, in that order. Keep in mind "
    "that not all of the context information may be relevant to the task, so use your judgement to "
    "determine which parts to consider.\n"
    '- User Edits: In the section marked "### User Edits:", there is a record of the most recent changes '
    "made to the code, helping you understand the evolution of the code and the developer's intentions. "
    "These changes are listed from most recent to least recent. It's possible that some of the edit diff "
    "history is entirely irrelevant to the developer's change. The changes are provided in a unified "
    "line-diff format, i.e. with pluses and minuses for additions and deletions to the code.\n"
    "- User Excerpt: In the section marked \"### User Excerpt:\", there is a filepath to the developer's "
    "current file, and then an excerpt from that file. The <|editable_region_start|> and "
    "<|editable_region_end|> markers are within this excerpt. Your job is to rewrite only this editable "
    "region, not the whole excerpt. The excerpt provides additional context on the surroundings of the "
    "developer's edit.\n"
    "- Cursor Position: Within the user excerpt's editable region, the <|user_cursor_is_here|> flag "
    "indicates where the developer's cursor is currently located, which can be crucial for understanding "
    "what part of the code they are focusing on. Do not produce this marker in your output; simply take "
    "it into account.\n"
    "\n"
    "Your task is to predict and complete the changes the developer would have made next in the editable "
    "region. The developer may have stopped in the middle of typing. Your goal is to keep the developer "
    "on the path that you think they're following. Some examples include further implementing a class, "
    "method, or variable, or improving the quality of the code. Make sure the developer doesn't get "
    "distracted by ensuring your suggestion is relevant. Consider what changes need to be made next, if "
    "any. If you think changes should be made, ask yourself if this is truly what needs to happen. If "
    "you are confident about it, then proceed with the changes.\n"
    "\n"
    "# Steps\n"
    "\n"
    "1. **Review Context**: Analyze the context from the resources provided, such as recently viewed "
    "snippets, edit history, surrounding code, and cursor location.\n"
    "2. **Evaluate Current Code**: Determine if the current code within the tags requires any "
    "corrections or enhancements.\n"
    "3. **Suggest Edits**: If changes are required, ensure they align with the developer's patterns and "
    "improve code quality.\n"
    "4. **Maintain Consistency**: Ensure indentation and formatting follow the existing code style.\n"
    "\n"
    "# Output Format\n"
    "\n"
    "- Provide only the revised code within the tags. Do not include the tags in your output.\n"
    "- Ensure that you do not output duplicate code that exists outside of these tags.\n"
    "- Avoid undoing or reverting the developer's last change unless there are obvious typos or errors."
)


class InstinctFormat(EditFormat):
    """Continue's Instinct (continuedev/instinct, a Qwen2.5-Coder-7B fine-tune), as
    Continue's own client writes its prompt (continuedev/continue, core/nextEdit/;
    Apache-2.0): constants.ts's system prompt and the user prompt's first paragraph,
    templating/NextEditPromptEngine.ts's sections (`### Context:`, `### User Edits:`,
    `### User Excerpt:` with the file's path, the excerpt and then a fence that nothing
    opened, as written there), templating/instinct.ts's blocks: each chunk as
    `<|context_file|>: path`, `<|snippet|>` and its lines, each edit as `User edited
    file "path"` and a diff fence, oldest first (Continue's client appends each new diff
    to its list, though the system prompt says newest first), the excerpt with the region
    between its markers on lines of their own and the cursor marked. Continue sends a
    system and a user message, which the server renders with Qwen's chat template
    (ChatML: `<|im_start|>` and `<|im_end|>` are control tokens); the model answers
    with the region and ends with `<|im_end|>`, an end-of-generation token (the stop
    of Instinct's own evaluation, continuedev/instinct eval/). SmolLM2's vocabulary has
    both tokens too. The system prompt asks for the region alone, and Continue takes the
    answer whole, less a first line that opens a fence and a last line of backticks
    (core/autocomplete/postprocessing); Instinct's evaluation reads the region between
    the markers, so a region written between them is read as well."""

    family = "instinct"
    reads_chunks = True
    ends_with_end_token = True
    IM_START, IM_END = "<|im_start|>", "<|im_end|>"
    START, END, CURSOR = "<|editable_region_start|>", "<|editable_region_end|>", "<|user_cursor_is_here|>"
    cursor_marker = CURSOR
    CONTEXT_FILE, SNIPPET = "<|context_file|>", "<|snippet|>"
    SYSTEM = INSTINCT_SYSTEM_PROMPT
    USER_PREFIX = ("Reference the user excerpt, user edits, and the snippets to understand the developer's intent. "
                   "Update the editable region of the user excerpt by predicting and completing the changes they "
                   "would have made next. This may be a deletion, addition, or modification of code.")

    def prompt(self, path: str, before: str, region: Region, after: str, events: list[EditEvent],
               chunks: tuple[ContextFile, ...] = ()) -> EditPrompt:
        snippets = [[f"{self.CONTEXT_FILE}: ", Theirs(chunk.path), f"\n{self.SNIPPET}\n",
                     Theirs(_without_last_break(chunk.text)[0])] for chunk in chunks]
        history = [['User edited file "', Theirs(event.path), '"\n\n```diff\n',
                    Theirs(_without_last_break(event.diff)[0]), "\n```"] for event in events]
        body, _ = _without_last_break(region.text)
        cursor = min(region.cursor, len(body))
        following = f"\n{_without_last_break(after)[0]}" if after else ""
        start, end = Segment(self.IM_START, special=True), Segment(self.IM_END, special=True)
        chat = segments_of(
            start, f"system\n{self.SYSTEM}", end, "\n", start,
            f"user\n{self.USER_PREFIX}\n\n### Context:\n", *joined("\n\n", snippets), "\n\n### User Edits:\n\n",
            *joined("\n", history), "\n\n### User Excerpt:\n", Theirs(path), "\n\n", Theirs(before),
            f"{self.START}\n", Theirs(body[:cursor]), self.CURSOR, Theirs(body[cursor:]), f"\n{self.END}",
            Theirs(following), "```\n### Response:", end, "\n", start, "assistant\n")
        return EditPrompt(chat, body, (self.IM_END, self.END))

    def rewrite(self, output: str, stopped: bool, region_text: str) -> str | None:
        if not stopped:
            return None
        output = without_echoed(self.CURSOR, output, region_text)
        if not region_text.startswith(f"{self.START}\n"):
            output = output.removeprefix(f"{self.START}\n")
        lines, region_lines = output.rstrip("\n").split("\n"), region_text.rstrip("\n").split("\n")
        if lines[0].startswith("```") and not region_lines[0].startswith("```"):  # a fence the answer opened
            lines = lines[1:]
        if lines and re.fullmatch("`+", lines[-1].strip()) and not re.fullmatch("`+", region_lines[-1].strip()):
            lines = lines[:-1]
        return "\n".join(lines)


def _changed_lines(before: str, after: str) -> tuple[str, str]:
    """The lines from the first that differs to the last, before and after (no final break)."""
    old, new = _lines(before), _lines(after)
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return (_without_last_break("".join(old[head:len(old) - tail]))[0],
            _without_last_break("".join(new[head:len(new) - tail]))[0])


def _lines_before_edit(event: EditEvent, region: Region) -> str | None:
    """The region's lines in the document before `event`, when the event's text after
    it is the document the region is in (no final break); else None."""
    if event.after[region.start:region.end] != region.text:
        return None
    first, count = len(_lines(event.after[:region.start])), len(_lines(region.text))
    return _without_last_break("".join(_lines(event.before)[first:first + count]))[0]


def _without_last_break(text: str) -> tuple[str, str]:
    for break_ in ("\r\n", "\n", "\r"):
        if text.endswith(break_):
            return text[:-len(break_)], break_
    return text, ""


FORMATS = {format_.family: format_ for format_ in (InstructionFormat(), ZetaFormat(), SweepFormat(),
                                                   InstinctFormat())}


# Zed's estimate of a text's tokens: a byte count / 3 (crates/zeta/src/zeta1.rs,
# BYTES_PER_TOKEN_GUESS); characters here.
CHARACTERS_PER_TOKEN = 3


def recent(events: list[EditEvent], tokens: int) -> list[EditEvent]:
    """The newest events whose diffs fit in `tokens` (estimated), oldest first."""
    kept, budget = [], tokens * CHARACTERS_PER_TOKEN
    for event in reversed(events):
        budget -= len(event.diff) + len(event.path)
        if budget < 0:
            break
        kept.append(event)
    return kept[::-1]


@dataclass(frozen=True)
class FittedEdit:
    prompt: EditPrompt
    region: Region
    prompt_tokens: int
    answer_tokens: int  # the most the rewrite may take: the region's copy and room to change it
    copy_from: str  # what copy drafting proposes from (copy_source)


def copy_source(copy: str, events: list[EditEvent]) -> str:
    """What copy drafting proposes from: the text a rewrite of the region copies, then the
    lines each of the prompt's recent edits made, newest first. A rewrite that makes an
    edit again (a renamed parameter's other uses) copies what the user just wrote, and
    the drafter's ties go to the earliest place: the region, then the newest edit."""
    made = (_changed_lines(event.before, event.after)[1] for event in reversed(events))
    return "\n".join([copy, *(lines for lines in made if lines)])


def answer_budget(copy_tokens: int) -> int:
    """Tokens a rewrite may take: the region's, and half again (at least 32) for what the edit adds."""
    return copy_tokens + max(32, copy_tokens // 2)


@dataclass(frozen=True, kw_only=True)
class EditFitting:
    """How a next-edit prompt is fitted: the region's lines (above and below the cursor's,
    and of context on each side), the format, the room in tokens and how they are counted,
    the recent edits and other files' chunks it may take."""

    lines_above: int
    lines_below: int
    context_lines: int
    edit_format: EditFormat
    room: int  # tokens for the prompt and the rewrite together
    count: Callable[[str], int]  # a text's length in the model's tokens
    events: list[EditEvent] = field(default_factory=list)
    chunks: tuple[ContextFile, ...] = ()


def fit_edit_prompt(text: str, cursor: int, path: str, fitting: EditFitting) -> FittedEdit | None:
    """The prompt for the region around the cursor with `fitting`'s events and chunks, and
    its rewrite's budget, together within its room. The oldest chunks give way first (the
    recent edits say more of the next edit than another file's code), then the oldest
    events, then the context, then the region (each side halved); None when a region of
    the cursor's line alone, with nothing around it, does not fit. At most chunks +
    events + log2 of each line count + 1 measurements of the prompt, and one of the copy
    per region."""
    above, below, context = fitting.lines_above, fitting.lines_below, fitting.context_lines
    edit_format, count, events = fitting.edit_format, fitting.count, fitting.events
    chunks = fitting.chunks if edit_format.reads_chunks else ()
    counted_copy, copy_tokens = None, 0
    while True:
        region = editable_region(text, cursor, above, below)
        around = editable_region(text, cursor, above + context, below + context)
        prompt = edit_format.prompt(path, text[around.start:region.start], region, text[region.end:around.end], events,
                                    chunks)
        if prompt.copy != counted_copy:  # only a smaller region changes it (a count may be a server's /tokenize)
            counted_copy, copy_tokens = prompt.copy, count(prompt.copy)
        prompt_tokens = count(prompt.text)
        if prompt_tokens + answer_budget(copy_tokens) <= fitting.room:
            return FittedEdit(prompt, region, prompt_tokens, answer_budget(copy_tokens),
                              copy_source(prompt.copy, events))
        if chunks:
            chunks = chunks[1:]
        elif events:
            events = events[1:]
        elif context:
            context //= 2
        elif above or below:
            above, below = above // 2, below // 2
        else:
            return None

"""Prompts per model family. Each family's fill-in-the-middle format is data: a table
of control-token texts and the order of the sections, rendered by one function.

A prompt is a list of segments, each either a control token (by its text, looked up
in the vocabulary) or plain text (tokenized as text, so a file that contains a
control token's spelling cannot inject it). Sections go stablest first, so that
typing at the cursor changes only the end of the prompt.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

# How a file's language writes a line comment, by extension; `#` where unknown.
LINE_COMMENT = {
    **dict.fromkeys(["py", "sh", "bash", "rb", "pl", "r", "yaml", "yml", "toml", "mk", "cmake"], "#"),
    **dict.fromkeys(
        ["c", "h", "cc", "cpp", "hpp", "cs", "java", "js", "jsx", "ts", "tsx", "go", "rs", "swift", "kt", "scala",
         "dart", "php", "zig"],
        "//",
    ),
    **dict.fromkeys(["lua", "sql", "hs", "elm"], "--"),
    **dict.fromkeys(["vim"], '"'),
    **dict.fromkeys(["el", "lisp", "clj", "scm"], ";;"),
}


# The prefix window starts on a multiple of this many lines: typing on past a line end
# then leaves the prompt's start where it was (and its KV cache valid) for 32 lines.
PREFIX_STEP = 32


def editor_lines(text: str) -> list[str]:
    """Lines with their ends, split where editors split them: at "\n" only, not at the
    form feeds and Unicode separators str.splitlines also breaks on."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines


def cursor_sections(text: str, cursor: int, prefix_lines: int = 256, suffix_lines: int = 8) -> tuple[str, str]:
    """(prefix, suffix) around the cursor (an offset in characters): at least
    `prefix_lines` whole lines before the cursor's (fewer than PREFIX_STEP more), and
    `suffix_lines` after it."""
    line = text.count("\n", 0, cursor)
    first = max(0, line - prefix_lines)
    first -= first % PREFIX_STEP
    start = text.rfind("\n", 0, cursor) + 1  # the cursor line's start, then back line by line
    for _ in range(line - first):
        start = text.rfind("\n", 0, start - 1) + 1
    end = cursor  # past the cursor line's end, then `suffix_lines` more line ends
    for _ in range(suffix_lines + 1):
        end = text.find("\n", end) + 1
        if end == 0:
            end = len(text)
            break
    return text[start:cursor], text[cursor:end]


@dataclass(frozen=True)
class Segment:
    text: str
    special: bool = False  # a control token, looked up by its text


@dataclass(frozen=True)
class FimTemplate:
    """One family's fill-in-the-middle format.

    `order` is "psm" (prefix, suffix, then generate the middle) or "spm" (suffix
    first). Repository context, when the family was trained with it, is the repo name
    and then one `file_separator` + path line + text per file, the current file last.
    """

    family: str
    prefix: str
    suffix: str
    middle: str | None  # None: generation starts right after the last section
    order: str = "psm"
    repo_name: str | None = None
    file_separator: str | None = None

    def required_tokens(self) -> list[str]:
        return [t for t in (self.prefix, self.suffix, self.middle) if t is not None]


# Every family we format, as llama.cpp's server formats them: control tokens and code
# with nothing in between. Most specific first: a vocabulary is matched by its FIM tokens.
TEMPLATES = [
    FimTemplate("qwen2.5-coder", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                repo_name="<|repo_name|>", file_separator="<|file_sep|>"),
    FimTemplate("deepseek-coder", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    FimTemplate("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>",
                repo_name="<repo_name>", file_separator="<file_sep>"),
    # SentencePiece stores CodeLlama's controls with their leading space marker.
    FimTemplate("codellama", "▁<PRE>", "▁<SUF>", "▁<MID>"),
    # Mistral's FIM: suffix first, and the model writes the middle after the prefix.
    FimTemplate("codestral", "[PREFIX]", "[SUFFIX]", None, order="spm"),
]


def detect_template(is_control_token: Callable[[str], bool]) -> FimTemplate | None:
    """The family whose FIM control tokens the vocabulary has; None for a model without
    FIM tokens, which then gets a prefix-only prompt."""
    for template in TEMPLATES:
        if all(is_control_token(token) for token in template.required_tokens()):
            return template
    return None


@dataclass(frozen=True)
class ContextFile:
    """Another file's text (or a chunk of it) given to the model as context."""

    path: str
    text: str


def path_header(path: str) -> str:
    """A first line naming the file, in its language's comment syntax: models trained on
    repositories predict better when they know the file's name and language."""
    comment = LINE_COMMENT.get(PurePath(path).suffix.lstrip(".").lower(), "#")
    return f"{comment} {path}\n"


def render(template: FimTemplate | None, path: str, prefix: str, suffix: str = "",
           context: tuple[ContextFile, ...] = (), repo: str = "") -> list[Segment]:
    """The prompt's segments, stablest first: repository, other files, this file's
    header, then the sections around the cursor."""
    if template is None:
        # No FIM: other files as comment-headed blocks, then this file up to the cursor.
        blocks = [Segment(path_header(f.path) + f.text.rstrip("\n") + "\n\n") for f in context]
        return [*blocks, Segment(path_header(path) + prefix)]
    segments: list[Segment] = []
    if template.file_separator and (context or repo):
        if template.repo_name and repo:
            segments += [Segment(template.repo_name, True), Segment(f"{repo}\n")]
        for f in context:
            segments += [Segment(template.file_separator, True), Segment(f"{f.path}\n{f.text.rstrip(chr(10))}\n")]
        segments += [Segment(template.file_separator, True), Segment(f"{path}\n")]
    prefix_part = [Segment(template.prefix, True), Segment(prefix)]
    suffix_part = [Segment(template.suffix, True), Segment(suffix)]
    segments += prefix_part + suffix_part if template.order == "psm" else suffix_part + prefix_part
    if template.middle is not None:
        segments.append(Segment(template.middle, True))
    return [s for s in segments if s.special or s.text]


class Vocabulary(Protocol):
    """What prompts need of a model (models.backend.LlamaModel is one)."""

    def tokenize(self, text: str, parse_special: bool = False) -> list[int]: ...

    def token_text(self, token: int) -> str: ...

    def token_bytes(self, token: int) -> bytes: ...


def control_token(vocabulary: Vocabulary, text: str) -> int | None:
    """The id of the control token spelt `text`, or None when the vocabulary has none."""
    tokens = vocabulary.tokenize(text, parse_special=True)
    return tokens[0] if len(tokens) == 1 and vocabulary.token_text(tokens[0]) == text else None


def template_for(vocabulary: Vocabulary) -> FimTemplate | None:
    return detect_template(lambda text: control_token(vocabulary, text) is not None)


def tokenize_segments(vocabulary: Vocabulary, segments: list[Segment]) -> list[int]:
    tokens: list[int] = []
    for segment in segments:
        if segment.special:
            token = control_token(vocabulary, segment.text)
            if token is None:
                raise ValueError(f"the vocabulary has no control token {segment.text!r}")
            tokens.append(token)
        else:
            tokens += vocabulary.tokenize(segment.text)
    return tokens

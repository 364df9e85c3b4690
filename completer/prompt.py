"""Prompts per model family. Each family's fill-in-the-middle format is data: a table
of control-token texts and the order of the sections, rendered by one function.

A prompt is a list of segments, each either a control token (by its text, looked up
in the vocabulary) or plain text (tokenized as text, so a file that contains a
control token's spelling cannot inject it). Sections go stablest first, so that
typing at the cursor changes only the end of the prompt. A prompt sent as text (to a
server that tokenizes it) has every special token's spelling taken out of the file's
text instead (text_prompt).
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby
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
    # The prompt format's own text (a next-edit format's markers and instructions), not a
    # document's: sent as written where a document's text has special tokens taken out
    # (text_prompt), and tokenized with the text beside it, as one run.
    markup: bool = False


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
    why: str = ""  # why the prompt holds it, for a user reading the prompt (not rendered)


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
    """What prompts need of a model (models.llama.LlamaModel is one)."""

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
    """Each control token, and each text segment tokenized on its own (so that typing at
    the end of the prompt leaves the tokens before it as they were), except that markup
    and the text on either side of it are tokenized together, as the one text they make."""
    tokens: list[int] = []
    for run in _text_runs(segments):
        if run[0].special:
            token = control_token(vocabulary, run[0].text)
            if token is None:
                raise ValueError(f"the vocabulary has no control token {run[0].text!r}")
            tokens.append(token)
        else:
            tokens += vocabulary.tokenize("".join(segment.text for segment in run))
    return tokens


def _text_runs(segments: list[Segment]) -> list[list[Segment]]:
    """The segments in runs tokenized as one: a control token alone; text segments joined
    where markup lies between or beside them."""
    runs: list[list[Segment]] = []
    for segment in segments:
        previous = runs[-1][-1] if runs else None
        if (previous is not None and not segment.special and not previous.special
                and (segment.markup or previous.markup)):
            runs[-1].append(segment)
        else:
            runs.append([segment])
    return runs


# Every added token of each family's vocabulary (its tokenizer's added tokens; llama.cpp
# marks them control or user-defined): a server given the prompt as text parses each of
# these out of it (llama-server's parse_special, Hugging Face's added tokens, vLLM), so a
# file's text must spell none. All families' at once: the family is a guess from the
# model's name, and taking `<s>` out of a file's HTML costs less than an injected token.
SPECIAL_TOKENS = (
    # qwen2.5-coder: the <|...|> ones are SPECIAL_PATTERN's; these two are plain added tokens
    "<tool_call>", "</tool_call>",
    # starcoder (StarCoder2; SmolLM2 and StarCoder 1 have these and <reponame>, <filename>)
    "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<repo_name>", "<reponame>", "<file_sep>",
    "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>",
    "<jupyter_text>", "<jupyter_code>", "<jupyter_output>", "<jupyter_script>", "<empty_output>",
    "<code_to_intermediate>", "<intermediate_to_code>", "<pr>", "<pr_status>", "<pr_is_merged>", "<pr_base>",
    "<pr_file>", "<pr_base_code>", "<pr_diff>", "<pr_diff_hunk>", "<pr_comment>", "<pr_event_id>", "<pr_review>",
    "<pr_review_state>", "<pr_review_comment>", "<pr_in_reply_to_review_id>", "<pr_in_reply_to_comment_id>",
    "<pr_diff_hunk_comment_line>", "<NAME>", "<EMAIL>", "<KEY>", "<PASSWORD>",
    # deepseek-coder: the <｜...｜> ones are SPECIAL_PATTERN's
    "<pad>",
    # codellama: SentencePiece's controls, with and without the space marker
    "▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>", "<PRE>", "<SUF>", "<MID>", "<EOT>", "<s>", "</s>", "<unk>",
    # codestral (Mistral's v3 vocabulary): the [control_N] ones are SPECIAL_PATTERN's
    "[PREFIX]", "[SUFFIX]", "[MIDDLE]", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
)
# The spellings of whole families of special tokens, for vocabularies not listed above
# (an OpenAI-compatible server says nothing of its vocabulary): <|...|> (Qwen's, GPT-2's
# <|endoftext|>, Llama 3's, Phi's), DeepSeek's full-width <｜...｜>, Mistral's [control_N].
SPECIAL_PATTERN = r"<\|[^\s|<>]{1,64}\|>|<｜[^\s｜<>]{1,64}｜>|\[control_\d{1,4}\]"
SPECIAL_ANYWHERE = re.compile(f"{'|'.join(map(re.escape, SPECIAL_TOKENS))}|{SPECIAL_PATTERN}")
# The same spellings written backwards, matched at the start of a reversed text: the
# spelling a text ends with, in one anchored match (see without_special_tokens).
SPECIAL_REVERSED = re.compile("|".join(re.escape(token[::-1]) for token in SPECIAL_TOKENS)
                              + r"|>\|[^\s|<>]{1,64}\|<|>｜[^\s｜<>]{1,64}｜<|\]\d{1,4}_lortnoc\[")
# The longest spelling either matches: <| + 64 + |>, or the longest listed.
SPECIAL_LONGEST = max(68, *map(len, SPECIAL_TOKENS))
SPELLINGS_END = re.compile(r"[>\]]")  # every spelling's last character


def text_prompt(segments: list[Segment]) -> str:
    """The prompt as text: control tokens spelt out, markup as written, and each run of
    a document's text without special tokens (a run joined first: the seam of two pieces
    could spell one)."""
    return "".join(text if kept else without_special_tokens(text)
                   for kept, run in groupby(segments, key=lambda segment: segment.special or segment.markup)
                   for text in ["".join(segment.text for segment in run)])


def without_special_tokens(text: str) -> str:
    """`text` with every special token's spelling (SPECIAL_TOKENS, SPECIAL_PATTERN) taken
    out, to a fixed point: what is left spells none, also where taking one out joins its
    neighbours into another (`<|fim_<|fim_middle|>middle|>`). One pass, as brackets are
    matched: the text is kept a piece at a time, each piece ending at a `>` or `]` (where
    every spelling ends), and a spelling is taken out as soon as the kept text ends with
    one, so the kept text never holds one. Linear however deep the nesting."""
    first = SPECIAL_ANYWHERE.search(text)
    if first is None:
        return text
    kept = list(text[: first.start()])  # spells none: a spelling ending sooner would start sooner
    start = first.start()
    for end in SPELLINGS_END.finditer(text, start):
        kept += text[start : end.end()]
        start = end.end()
        if found := SPECIAL_REVERSED.match("".join(reversed(kept[-SPECIAL_LONGEST:]))):
            del kept[-found.end():]
    kept += text[start:]
    return "".join(kept)

"""Prompts per model family: the exact segments, control tokens apart from text."""

import pytest

from completer.models.llama import LlamaModel
from completer.prompt import (
    TEMPLATES,
    ContextFile,
    Segment,
    control_token,
    cursor_sections,
    detect_template,
    render,
    template_for,
    tokenize_segments,
)

BY_FAMILY = {t.family: t for t in TEMPLATES}
PREFIX = "def area(r):\n    return "
SUFFIX = "\n\nprint(area(2))\n"
OTHER = ContextFile("geometry/constants.py", "PI = 3.14159\n")


def S(text):
    return Segment(text, special=True)


def T(text):
    return Segment(text)


EXPECTED = {
    "qwen2.5-coder": [S("<|fim_prefix|>"), T(PREFIX), S("<|fim_suffix|>"), T(SUFFIX), S("<|fim_middle|>")],
    "deepseek-coder": [S("<｜fim▁begin｜>"), T(PREFIX), S("<｜fim▁hole｜>"), T(SUFFIX), S("<｜fim▁end｜>")],
    "starcoder": [S("<fim_prefix>"), T(PREFIX), S("<fim_suffix>"), T(SUFFIX), S("<fim_middle>")],
    "codellama": [S("▁<PRE>"), T(PREFIX), S("▁<SUF>"), T(SUFFIX), S("▁<MID>")],
    "codestral": [S("[SUFFIX]"), T(SUFFIX), S("[PREFIX]"), T(PREFIX)],
}


@pytest.mark.parametrize("family", EXPECTED)
def test_the_exact_prompt_of_each_family(family):
    assert render(BY_FAMILY[family], "geometry/area.py", PREFIX, SUFFIX) == EXPECTED[family]


def test_qwen_repository_context_comes_first_with_file_separators():
    segments = render(BY_FAMILY["qwen2.5-coder"], "geometry/area.py", PREFIX, SUFFIX, (OTHER,), repo="shapes")
    assert segments == [
        S("<|repo_name|>"), T("shapes\n"),
        S("<|file_sep|>"), T("geometry/constants.py\nPI = 3.14159\n"),
        S("<|file_sep|>"), T("geometry/area.py\n"),
        *EXPECTED["qwen2.5-coder"],
    ]


def test_starcoder_repository_context():
    segments = render(BY_FAMILY["starcoder"], "geometry/area.py", PREFIX, SUFFIX, (OTHER,), repo="shapes")
    assert segments[:6] == [S("<repo_name>"), T("shapes\n"), S("<file_sep>"),
                            T("geometry/constants.py\nPI = 3.14159\n"), S("<file_sep>"), T("geometry/area.py\n")]


def test_a_family_without_repository_tokens_gets_the_plain_fim_prompt():
    assert render(BY_FAMILY["deepseek-coder"], "a.py", PREFIX, SUFFIX, (OTHER,)) == EXPECTED["deepseek-coder"]


@pytest.mark.parametrize("family", EXPECTED)
def test_each_family_is_detected_from_its_control_tokens(family):
    template = BY_FAMILY[family]
    vocabulary = set(template.required_tokens()) | {"<|endoftext|>"}
    assert detect_template(vocabulary.__contains__) == template


def test_a_vocabulary_without_fim_tokens_gets_no_template():
    assert detect_template({"<|endoftext|>", "<fim_prefix>", "<file_sep>"}.__contains__) is None


def test_without_fim_the_prompt_is_the_prefix_under_a_path_comment():
    assert render(None, "geometry/area.py", PREFIX, SUFFIX) == [T("# geometry/area.py\n" + PREFIX)]
    assert render(None, "src/main.rs", "fn main() {", "}") == [T("// src/main.rs\nfn main() {")]
    with_context = render(None, "geometry/area.py", PREFIX, SUFFIX, (OTHER,))
    assert with_context[0] == T("# geometry/constants.py\nPI = 3.14159\n\n")


def test_the_smol_vocabulary_has_no_fim_template_but_has_file_separators(smol):
    model = LlamaModel(smol.target, vocab_only=True)
    assert template_for(model) is None
    assert control_token(model, "<file_sep>") == 5
    assert control_token(model, "<fim_prefix>") is None


def test_control_tokens_are_looked_up_and_text_never_parsed_as_control(smol):
    model = LlamaModel(smol.target, vocab_only=True)
    tokens = tokenize_segments(model, [S("<file_sep>"), T("x = '<file_sep>'\n")])
    assert tokens[0] == 5
    assert 5 not in tokens[1:]
    with pytest.raises(ValueError, match="no control token '<fim_middle>'"):
        tokenize_segments(model, [S("<fim_middle>")])


def test_cursor_sections_are_bounded_and_split_at_the_column():
    text = "".join(f"line {i}\n" for i in range(400))
    prefix, suffix = cursor_sections(text, text.index("line 300\n") + 4, prefix_lines=256, suffix_lines=64)
    assert prefix.endswith("line 299\nline")
    assert prefix.startswith("line 32\n")  # 256 whole lines before the cursor's, from a multiple of 32
    assert suffix.startswith(" 300\nline 301\n")
    assert suffix.endswith("line 364\n")  # 64 lines after the cursor's
    assert cursor_sections("", 0) == ("", "")


def test_the_prefix_window_start_stays_put_while_typing_on_for_32_lines():
    text = "".join(f"line {i}\n" for i in range(400))
    line_start = [0] + [i + 1 for i, char in enumerate(text) if char == "\n"]
    starts = {cursor_sections(text, line_start[line], prefix_lines=100)[0].split("\n", 1)[0]
              for line in range(100, 132)}
    assert starts == {"line 0"}
    assert cursor_sections(text, line_start[132], prefix_lines=100)[0].startswith("line 32\n")

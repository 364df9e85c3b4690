"""The editor side's prompt for a server: the FIM family from a served model's name, and
a text prompt (OpenAI's API) in which a file cannot spell a special token, nested
spellings and every family's special tokens included."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from completer.decoders.clients import OpenAIClient
from completer.decoders.server import OpenAIAPI, template_in_name, template_named
from completer.prompt import SPECIAL_PATTERN, SPECIAL_TOKENS, TEMPLATES, Segment, render, without_special_tokens


@pytest.mark.parametrize("name, family", [
    ("Qwen/Qwen2.5-Coder-7B", "qwen2.5-coder"),
    ("qwen2.5-coder-1.5b-q8_0.gguf", "qwen2.5-coder"),
    ("deepseek-ai/deepseek-coder-6.7b-base", "deepseek-coder"),
    ("bigcode/starcoder2-15b", "starcoder"),
    ("codellama/CodeLlama-7b-hf", "codellama"),
    ("mistralai/Codestral-22B-v0.1", "codestral"),
    ("HuggingFaceTB/SmolLM2-135M", None),
])
def test_a_served_models_name_says_its_family(name, family):
    template = template_in_name(name)
    assert (template.family if template else None) == family


def test_every_listed_spelling_ends_where_taking_spellings_out_cuts_the_text():
    """without_special_tokens keeps a file's text a piece at a time, each ending at a `>`
    or `]`: a listed token ending otherwise would never be taken out."""
    assert [token for token in SPECIAL_TOKENS if token[-1] not in ">]"] == []


def qwen_api() -> OpenAIAPI:
    return OpenAIAPI(OpenAIClient("http://127.0.0.1:1"), "qwen2.5-coder")


# Every FIM family's control tokens, and special tokens of vocabularies no template names.
CONTROLS = sorted({token for template in TEMPLATES for token in (*template.required_tokens(), template.repo_name,
                                                                  template.file_separator) if token})
OTHERS = ["<|endoftext|>", "<|fim_pad|>", "<|im_start|>", "<|im_end|>", "<|eot_id|>", "<｜end▁of▁sentence｜>",
          "<jupyter_code>", "</s>", "[INST]", "[control_8]"]
SPECIALS = CONTROLS + OTHERS
SPELLS_ONE = re.compile("|".join(map(re.escape, SPECIAL_TOKENS)) + "|" + SPECIAL_PATTERN)


def spelt_into(token: str, inner: str, at: int) -> str:
    """`inner` put inside `token`'s spelling: taking `inner` out leaves `token` whole."""
    at = at % (len(token) + 1)
    return token[:at] + inner + token[at:]


# A special token, or one with another such spelling nested in it, to any depth.
NESTED = st.recursive(st.sampled_from(SPECIALS), lambda inner: st.builds(
    spelt_into, st.sampled_from(SPECIALS), inner, st.integers(0, 40)), max_leaves=6)
PIECES = st.one_of(st.sampled_from(["x = 1\n", "def f(", " ", "<", "|", ">", "[", "]", "▁", "｜"]), NESTED)


@given(st.lists(PIECES, max_size=10))
def test_a_files_text_cannot_spell_a_special_token_into_a_text_prompt(pieces):
    text = "".join(pieces)
    prompt, length = qwen_api().encode(render(template_named("qwen2.5-coder"), "a.py", text, text))
    body = prompt[len("<|fim_prefix|>"):prompt.rindex("<|fim_suffix|>")]
    assert not SPELLS_ONE.search(body), body
    assert not any(special in body for special in SPECIALS)
    assert prompt.startswith("<|fim_prefix|>") and prompt.endswith("<|fim_middle|>")
    assert prompt.count("<|fim_suffix|>") == 1 and length * 3 >= len(prompt)


@given(st.text(st.characters(blacklist_characters="<>[]")))
def test_text_that_spells_no_special_token_reaches_the_prompt_unchanged(text):
    assert without_special_tokens(text) == text


@pytest.mark.parametrize("text, kept", [
    ("<|fim_<|fim_middle|>middle|>", ""),  # one removal would leave <|fim_middle|>
    ("a<|im_<|end<|endoftext|>oftext|>start|>b", "ab"),
    ("<fim_<file_sep>prefix>x", "x"),
    ("if a <| b |> c: pass", "if a <| b |> c: pass"),  # an operator, not a token's spelling
    ("vector<int> v; x[i] = y[PREFIX_LEN]", "vector<int> v; x[i] = y[PREFIX_LEN]"),
])
def test_nested_spellings_are_taken_out_to_a_fixed_point(text, kept):
    assert without_special_tokens(text) == kept


def test_control_tokens_are_spelt_out_in_order():
    prompt, _ = qwen_api().encode([Segment("<|fim_prefix|>", True), Segment("a<|fim_middle|>b"),
                                       Segment("<|fim_suffix|>", True), Segment("c"), Segment("<|fim_middle|>", True)])
    assert prompt == "<|fim_prefix|>ab<|fim_suffix|>c<|fim_middle|>"


def test_two_plain_pieces_cannot_spell_a_token_across_their_seam():
    prompt, _ = qwen_api().encode([Segment("x<|im_"), Segment("start|>y")])
    assert prompt == "xy"

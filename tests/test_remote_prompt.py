"""The editor side's prompt for a server: the FIM family from a served model's name, and
a text prompt (OpenAI's API) in which a file cannot spell a control token."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from completer.prompt import Segment, render
from completer.remote import OpenAIClient
from completer.remote_session import OpenAIBackend, template_in_name, template_named


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


def qwen_backend() -> OpenAIBackend:
    backend = OpenAIBackend(OpenAIClient("http://127.0.0.1:1"), "qwen2.5-coder")
    template = template_named("qwen2.5-coder")
    backend.controls = (*template.required_tokens(), template.repo_name, template.file_separator)
    return backend


CONTROLS = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>"]


@given(st.lists(st.sampled_from(["x = 1\n", "def f(", " ", "<", "|", ">", *CONTROLS]), max_size=12))
def test_a_files_text_cannot_spell_a_control_token_into_a_text_prompt(pieces):
    text = "".join(pieces)
    backend = qwen_backend()
    prompt, length = backend.encode(render(template_named("qwen2.5-coder"), "a.py", text, text))
    body = prompt[len("<|fim_prefix|>"):prompt.rindex("<|fim_suffix|>")]
    assert not any(control in body for control in CONTROLS)
    assert prompt.startswith("<|fim_prefix|>") and prompt.endswith("<|fim_middle|>")
    assert prompt.count("<|fim_suffix|>") == 1 and length * 3 >= len(prompt)


def test_control_tokens_are_spelt_out_in_order():
    prompt, _ = qwen_backend().encode([Segment("<|fim_prefix|>", True), Segment("a<|fim_middle|>b"),
                                       Segment("<|fim_suffix|>", True), Segment("c"), Segment("<|fim_middle|>", True)])
    assert prompt == "<|fim_prefix|>ab<|fim_suffix|>c<|fim_middle|>"

"""The engine's rules that do not depend on the model family, on both embedded models:
smol (llama, full attention, a 49k vocabulary, an instruct model) and Gemma 3 270M
(gemma3, sliding-window attention, a 262k vocabulary, a base model). Losslessness, a
cache cut at an edit (one older than Gemma's window too), token healing, and a whole
completion through the Completer's post-processing."""

import sysconfig
from pathlib import Path

import numpy as np
import pytest

from completer.config import Config, GenerationOptions
from completer.decoders.local import LocalDecoder
from completer.editor.completer import Completer
from completer.engine.generation import Engine, GenerationRequest, generate
from completer.engine.healing import TokenPrefixes, heal
from completer.engine.speculative import parting_gap
from completer.models.llama import LlamaContext
from completer.requests import CompletionRequest

pytestmark = pytest.mark.slow  # minutes of real model passes: the full suite's, not the fast tier's

STDLIB = Path(sysconfig.get_paths()["stdlib"])
TEXTWRAP = (STDLIB / "textwrap.py").read_text()
# Evaluating a text in one batch or in pieces after a cut gives the same logits when
# the cache holds what it should (0.0 measured on smol); a stale or lost cell moves
# them by far more.
BATCH_TOLERANCE = 1e-3


@pytest.fixture(scope="module", params=["smol", pytest.param("gemma", marks=pytest.mark.slow)])  # a 262k vocabulary
def model(request):
    return request.getfixturevalue({"smol": "target", "gemma": "gemma_target"}[request.param])


def copy_with_changes(model) -> list[int]:
    """A prompt that ends a third of the way into a second copy of a textwrap method with
    `self` renamed: n-gram lookup drafts the first copy's tokens, which the target keeps
    until a renamed word and rejects there."""
    start = TEXTWRAP.index("    def _split(self, text):")
    method = TEXTWRAP[start:TEXTWRAP.index("\n    def ", start + 10)]
    renamed = method.replace("self", "this")
    return model.tokenize(TEXTWRAP[:start][-1500:] + method + "\n\n" + renamed[:len(renamed) // 3])


def single_step_noise(model, prompt: list[int], continuation: list[int]) -> float:
    """How far this model's logits move between one batch and one token at a time, along
    plain decoding's own text: the most two logits can move apart is twice that, so a
    near-tie flip from batching has a gap below it there."""
    batched = LlamaContext(model, n_ctx=2048)
    stepped = LlamaContext(model, n_ctx=2048, single_token_eval=True)
    positions = list(range(len(prompt) - 1, len(prompt) + len(continuation) - 1))
    text = prompt + continuation
    return float(np.abs(batched.eval(text, 0, logits_at=positions) - stepped.eval(text, 0, logits_at=positions)).max())


# Forced lengths: with no cost curve measured (calibrate_s=0) the tuner's own k may not
# speculate at all, and the test would then compare plain decoding with itself.
@pytest.mark.parametrize("draft_length", [4, 16])
def test_with_single_token_verification_n_gram_speculation_is_plain_decoding(model, draft_length):
    engine = Engine(model, None, n_ctx=2048, calibrate_s=0, exact=True)
    prompt = copy_with_changes(model)
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=48, mode="target")).tokens
    fast = generate(engine, GenerationRequest(prompt=prompt, max_tokens=48, mode="ngram", draft_length=draft_length))
    assert fast.tokens == plain
    assert fast.stats.drafted > 10 and fast.stats.accepted > 0


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_batched_speculation_parts_from_plain_decoding_only_within_the_models_own_noise(model, mode):
    """The tie bound comes from the model in hand: its batched-versus-single logit noise
    along plain decoding's text."""
    engine = Engine(model, None, n_ctx=2048, calibrate_s=0.3)
    prompt = copy_with_changes(model)
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=48, mode="target", keep_logits=True))
    fast = generate(engine, GenerationRequest(prompt=prompt, max_tokens=48, mode=mode,
                                              draft_length=8 if mode == "ngram" else None, keep_logits=True))
    assert fast.stats.drafted > 0
    if fast.tokens != plain.tokens:
        gap = parting_gap(plain.logits, fast.logits.argmax(axis=1))
        bound = 2 * single_step_noise(model, prompt, plain.tokens)
        assert gap is not None and gap <= bound, f"parted where plain preferred its token by {gap} (noise {bound})"


def test_an_edit_anywhere_even_older_than_the_window_gives_a_fresh_evaluations_answer(model):
    """Gemma attends over a window of 512 tokens on most layers: the edit here is over a
    thousand tokens behind the cache's end, so a window-sized cache would have lost the
    cells the cut keeps (models/llama.py keeps them: swa_full)."""
    tokens = model.tokenize(TEXTWRAP[:9000])
    edit_at = 40
    assert len(tokens) - edit_at > 1000
    edited = tokens[:edit_at] + model.tokenize("# an edited line\n") + tokens[edit_at:]
    last = list(range(len(edited) - 16, len(edited)))
    expected = LlamaContext(model, n_ctx=4096).eval(edited, 0, logits_at=last)
    reused = LlamaContext(model, n_ctx=4096)
    reused.eval(tokens, 0)
    reused.truncate(edit_at)
    got = reused.eval(edited[edit_at:], edit_at, logits_at=[p - edit_at for p in last])
    assert np.abs(got - expected).max() <= BATCH_TOLERANCE
    assert (got.argmax(axis=1) == expected.argmax(axis=1)).all()


def test_healing_backs_up_over_a_word_begun_and_the_first_token_extends_it(model):
    prefixes = TokenPrefixes(model, model.n_vocab)
    engine = Engine(model, None, n_ctx=2048, calibrate_s=0)
    prompt = model.tokenize("import os\n\n\ndef main():\n    for name in os.listdir('.'):\n        pri")
    healed_prompt, healing = heal(prompt, model, prefixes)
    assert healing is not None and healing.text.endswith("pri") and len(healed_prompt) < len(prompt)
    result = generate(engine, GenerationRequest(prompt=healed_prompt, max_tokens=4, mode="auto", healing=healing))
    assert model.token_bytes(result.tokens[0]).startswith(healing.text.encode())
    assert result.text.startswith("nt")  # print(, the word begun


def test_a_completion_through_the_completer_stops_before_the_text_after_the_cursor(model):
    """A whole completion on either vocabulary: the prompt as the model was trained (BOS
    where its vocabulary asks for one), and post-processing that keeps the suggestion
    from running into the next function."""
    text = "def area(width, height):\n    return\n\n\ndef perimeter(width, height):\n    return 2 * (width + height)\n"
    cursor = text.index("return") + len("return")
    config = Config(generation=GenerationOptions(max_tokens=24, time_budget_ms=0))
    completer = Completer(LocalDecoder(Engine(model, None, n_ctx=2048, calibrate_s=0)), config)
    completion = completer.complete(CompletionRequest("shapes.py", "shapes.py", text, cursor, "python"))
    # Both write the product; Gemma only with the BOS its vocabulary asks prompts to start with.
    assert "width" in completion.text and "height" in completion.text, completion.text
    assert "def perimeter" not in completion.text
    assert not completion.text.endswith((" ", "\t"))

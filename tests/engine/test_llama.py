"""The llama.cpp backend on the real smol pair."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from completer.engine.speculative import NEAR_TIE_LOGITS
from completer.models.llama import LlamaContext, fewer_gpu_layers

# How far a kept branch's logits may lie from a fresh evaluation's: measured up to 0.55
# on an AVX-512 CPU and 1.11 on an AVX2 one (the same rows), where a cache holding a stale
# continuation was 5.98 off.
KEPT_CELLS_LOGITS = 2.0

CODE = '''def fibonacci(n):
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def factorial(n):
    result = 1
    for i in range(2, n + 1):
        result *= i
    return result
'''


# With flash attention off (the CPU default, see LlamaContext), a token's logits do not
# depend on how the tokens were split into batches: measured difference 0.0 here. The
# tolerance leaves room for last-bit differences of other CPUs' kernels only; a stale
# or shifted cache moves logits by more than 1.0 (test_a_stale_cache...).
BATCH_TOLERANCE = 1e-3


def test_the_smol_pair_loads_with_the_draft_a_cut_of_the_target(target, draft):
    assert target.architecture == draft.architecture == "llama"
    assert target.n_layers == 30
    assert draft.n_layers == 4
    assert target.n_vocab == draft.n_vocab == 49152
    assert target.load_ms > 0


def test_a_model_without_fim_tokens_reports_none(target):
    special = target.special
    assert (special.fim_prefix, special.fim_suffix, special.fim_middle) == (None, None, None)
    assert not special.has_fim
    assert special.eos is not None and target.is_end_of_generation(special.eos)


def test_control_token_text_in_a_file_stays_plain_text(target):
    tokens = target.tokenize("x = '<|endoftext|>'")
    assert target.special.eot not in tokens
    assert target.detokenize(tokens) == "x = '<|endoftext|>'"


# SmolLM2's byte-level vocabulary has no token for six control bytes (04 06 13 14 16
# 1D) nor for the UTF-8 lead bytes F1/F2 (planes 4-13, all unassigned); llama.cpp
# drops such bytes, so no round trip is possible there. Everything else must survive.
REPRESENTABLE = st.characters(
    max_codepoint=0x3FFFF, blacklist_categories=["Cs"], blacklist_characters="\x04\x06\x13\x14\x16\x1d"
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=REPRESENTABLE, max_size=200))
def test_tokenize_round_trip(target, text):
    assert target.detokenize(target.tokenize(text)) == text


# A completion cut at max_tokens inside an emoji: smol spells each of these in 3 tokens.
WAVES = ' lang + "👋👏👎👏"'


def test_tokens_that_end_inside_an_emoji_give_the_whole_characters_before_it(target):
    tokens = target.tokenize(WAVES)
    cut_inside = [n for n in range(len(tokens) + 1) if target.detokenize(tokens[:n]).endswith("\ufffd")]
    assert len(cut_inside) == 8, "this test needs emoji split across tokens"  # 2 cuts inside each of 4 emoji
    for n in cut_inside:
        whole = target.detokenize(tokens[:n], whole_characters=True)
        assert whole == target.detokenize(tokens[:n]).removesuffix("\ufffd") and WAVES.startswith(whole)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=REPRESENTABLE, max_size=60))
def test_tokens_cut_anywhere_give_the_whole_characters_before_the_cut(target, text):
    """A generation stops after any token: the text shown is the characters all of whose
    bytes came, each as written (a cut one is left out, never replaced with U+FFFD)."""
    tokens = target.tokenize(text)
    for n in range(len(tokens) + 1):
        data = b"".join(target.token_bytes(token) for token in tokens[:n])
        whole = target.detokenize(tokens[:n], whole_characters=True)
        assert text.startswith(whole) and 0 <= len(data) - len(whole.encode()) < 4  # at most one character's bytes


def test_eval_returns_the_logits_of_the_chosen_positions(target):
    context = LlamaContext(target, n_ctx=512)
    tokens = target.tokenize(CODE)
    logits = context.eval(tokens, 0, logits_at=[3, -1])  # [2, n_vocab]
    assert logits.shape == (2, target.n_vocab)
    assert context.length() == len(tokens)
    # The logits at position 3 are those of a fresh run over the first 4 tokens alone.
    context.truncate(0)
    alone = context.eval(tokens[:4], 0, logits_at=[-1])[0]
    np.testing.assert_allclose(alone, logits[0], atol=BATCH_TOLERANCE)


def test_truncate_then_reevaluate_matches_a_fresh_evaluation(target):
    """Cut the cache after an edit and evaluate the new text: the logits equal those of
    evaluating the new text from scratch, within BATCH_TOLERANCE."""
    tokens = target.tokenize(CODE)
    edit_at = len(tokens) // 2
    edited = tokens[:edit_at] + target.tokenize("    # an edited line\n") + tokens[edit_at:]

    fresh = LlamaContext(target, n_ctx=512)
    expected = fresh.eval(edited, 0, logits_at=list(range(edit_at, len(edited))))

    reused = LlamaContext(target, n_ctx=512)
    reused.eval(tokens, 0)
    reused.truncate(edit_at)
    assert reused.length() == edit_at
    got = reused.eval(edited[edit_at:], edit_at, logits_at=list(range(len(edited) - edit_at)))

    assert np.abs(got - expected).max() <= BATCH_TOLERANCE
    assert (got.argmax(axis=1) == expected.argmax(axis=1)).all()


def test_single_token_evaluation_scores_a_batch_bit_for_bit_as_plain_steps(target):
    """What exact verification rests on: with one token per decode, a batch's logits and
    a step-by-step run's are equal to the last bit, after a truncation too. (Batched,
    one-token steps differ from a batch: up to 0.94 logits on smol.)"""
    tokens = target.tokenize(CODE)
    start = len(tokens) // 2
    exact = LlamaContext(target, n_ctx=512, single_token_eval=True)
    batch = exact.eval(tokens, 0, logits_at=list(range(start, len(tokens))))  # [n - start, V]
    exact.truncate(start)
    steps = np.concatenate([exact.eval([token], start + i, logits_at=[0]) for i, token in enumerate(tokens[start:])])
    assert np.array_equal(batch, steps)


def test_a_token_trees_branch_scores_as_its_own_text_and_is_kept_as_if_it_had_been(target):
    """A branch in its own sequence, sharing the text's cells before its fork: its rows
    are those of its text evaluated alone (one token per decode: to the last bit). Once
    kept, the cache holds that text, the draft's tokens after the fork gone: it is as
    long, and what follows scores as after a fresh evaluation. Not to the last bit: the
    kept cells sit after the draft's freed ones in llama.cpp's pool, and attention sums
    over cells in pool order. So the logits are within KEPT_CELLS_LOGITS, and a row's
    argmax may flip only where the fresh evaluation's top two are that close."""
    tokens = target.tokenize(CODE)
    prompt, draft, branch = tokens[:40], tokens[40:48], tokens[44:47][::-1] + tokens[50:53]
    fork = 3  # the branch replaces draft[fork - 1:]: the draft's tokens it shares are [last, d1, d2]
    tree = LlamaContext(target, n_ctx=512, single_token_eval=True, branches=2)
    plain = LlamaContext(target, n_ctx=512, single_token_eval=True)
    tree.eval(prompt[:-1], 0)
    best, (branch_best, _) = tree.eval_tree([prompt[-1], *draft], len(prompt) - 1, [(fork, branch), (1, draft[::-1])])
    plain.eval(prompt[:-1], 0)
    assert list(best) == list(plain.eval([prompt[-1], *draft], len(prompt) - 1, range(len(draft) + 1), argmax=True))
    plain.truncate(len(prompt) - 1 + fork)
    assert list(branch_best) == list(plain.eval(branch, len(prompt) - 1 + fork, range(len(branch)), argmax=True))
    kept = 4
    tree.keep_branch(1, len(prompt) - 1 + fork, kept)
    text = prompt + draft[: fork - 1] + branch[:kept]
    assert tree.length() == len(text)
    following = tokens[10:40]
    got = tree.eval(following, len(text), range(len(following)))
    fresh = LlamaContext(target, n_ctx=512, single_token_eval=True).eval(text + following, 0,
                                                                       range(len(text), len(text) + len(following)))
    rows = np.arange(len(following))
    fresh_best, got_best = fresh.argmax(axis=1), got.argmax(axis=1)  # [n]
    gaps = fresh[rows, fresh_best] - fresh[rows, got_best]  # [n], 0 where both chose the same token
    assert (gaps < NEAR_TIE_LOGITS).all(), f"the kept branch parted from a fresh evaluation by {gaps.max()}"
    assert np.abs(got - fresh).max() < KEPT_CELLS_LOGITS


def test_a_stale_cache_is_caught_by_that_tolerance(target):
    """The other side of the test above: skipping the truncation leaves the old
    continuation in the cache, and the logits then differ by far more than the tolerance."""
    tokens = target.tokenize(CODE)
    edit_at = len(tokens) // 2
    edited = tokens[:edit_at] + target.tokenize("    # an edited line\n") + tokens[edit_at:]
    fresh = LlamaContext(target, n_ctx=1024)
    expected = fresh.eval(edited, 0, logits_at=[-1])
    stale = LlamaContext(target, n_ctx=1024)
    stale.eval(tokens, 0)
    got = stale.eval(edited[edit_at:], len(tokens), logits_at=[-1])  # appended after the old text
    assert np.abs(got - expected).max() > KEPT_CELLS_LOGITS


def test_a_saved_state_comes_back_after_another_document_used_the_cache(target):
    context = LlamaContext(target, n_ctx=1024)
    tokens = target.tokenize(CODE)
    first = context.eval(tokens, 0, logits_at=[-1])
    next_token = int(first[0].argmax())
    expected = context.eval([next_token], len(tokens), logits_at=[0])
    context.truncate(len(tokens))
    state = context.save()
    context.truncate(0)
    context.eval(target.tokenize("import os\nimport sys\n"), 0)  # the other document's turn
    context.restore(state)
    assert context.length() == len(tokens)
    np.testing.assert_allclose(context.eval([next_token], len(tokens), logits_at=[0]), expected, atol=1e-4)


def test_a_state_that_cannot_be_restored_leaves_the_sequence_empty(target, draft):
    """A cut state, or one from another model, is refused with llama.cpp's reason, and the
    sequence is then empty: never part of the state, never what it held before."""
    tokens = target.tokenize(CODE)
    context = LlamaContext(target, n_ctx=512)
    context.eval(tokens, 0)
    state = context.save()
    other = LlamaContext(draft, n_ctx=512)
    other.eval(tokens, 0)
    for bad in [state[: len(state) // 2], other.save()]:
        context.truncate(0)
        context.eval(tokens, 0)  # held before the restore: it must not survive a failed one
        with pytest.raises(RuntimeError, match="could not restore .*failed to restore kv cache"):
            context.restore(bad)
        assert context.length() == 0
    context.restore(state)  # the good state still goes back
    assert context.length() == len(tokens)


def test_eval_past_the_context_is_refused(target):
    context = LlamaContext(target, n_ctx=256)
    with pytest.raises(ValueError, match="do not fit"):
        context.eval(list(range(100, 100 + context.n_ctx + 1)), 0)
    context.eval(list(range(100, 100 + context.n_ctx)), 0)  # exactly full is fine


def test_out_of_gpu_memory_retries_with_half_the_layers_down_to_the_cpu():
    assert fewer_gpu_layers(31) == [31, 15, 7, 3, 1, 0]
    assert fewer_gpu_layers(0) == [0]

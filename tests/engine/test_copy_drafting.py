"""Copy drafting: a rewrite (a next edit's region written again) drafts from the text it
rewrites. The proposals follow the rewrite wherever it stands in the original, and the
output stays plain decoding's exactly."""

import numpy as np
import pytest

from completer.engine.drafts import CopyDrafter
from completer.engine.generation import Engine, GenerationRequest, generate
from completer.engine.speculative import NEAR_TIE_LOGITS, parting_gap
from completer.engine.tuning import CostModel

ORIGINAL = [10, 11, 12, 13, 14, 15, 11, 12, 16, 17]
PROMPT = [1, 2, 3]


def test_a_rewrite_is_proposed_the_original_from_where_it_stands():
    copy = CopyDrafter(ORIGINAL, start=len(PROMPT))
    assert copy.lookup(PROMPT, 4).tokens == [10, 11, 12, 13]  # nothing written yet: from the beginning
    assert copy.lookup(PROMPT + [10, 11, 12, 13], 3).tokens == [14, 15, 11]  # the copy goes on
    # "11 12" occurs twice: the longer match places it (after 15 11 12 comes 16).
    assert copy.lookup(PROMPT + [10, 11, 12, 13, 14, 15, 11, 12], 2).tokens == [16, 17]
    # A token the original lacks: nothing to copy until the rewrite meets the original again.
    assert copy.lookup(PROMPT + [10, 99], 4).tokens == []
    realigned = copy.lookup(PROMPT + [10, 99, 14], 3)
    assert (realigned.tokens, realigned.length) == ([15, 11, 12], 1)
    assert copy.lookup(PROMPT + ORIGINAL, 4).tokens == []  # copied to the end: nothing left
    assert copy.lookup(PROMPT, 0).tokens == []


def test_a_tie_goes_to_where_the_copy_was_going():
    original = [5, 7, 8, 5, 7, 9]
    copy = CopyDrafter(original, start=0)
    assert copy.lookup([], 3).tokens == [5, 7, 8]
    copy.lookup([5, 7, 8], 1)  # proposes 5, after which the copy is at position 4
    assert copy.lookup([5, 7, 8, 5], 2).tokens == [7, 9]  # "5" ties at positions 1 and 4: the copy's
    assert CopyDrafter(original, start=0).lookup([5], 2).tokens == [7, 8]  # with no copy going: the first


def test_where_the_alignment_is_ambiguous_the_other_copy_comes_as_a_branch():
    original = [5, 7, 8, 5, 7, 9, 5, 7, 9]
    tied = CopyDrafter(original, start=0, branches=2).lookup([5], 3)
    # "5" ties at positions 1, 4 and 7: the first is proposed; 4 parts from it at its
    # second token; 7 goes on as 4 does, so it adds no branch of its own.
    assert (tied.tokens, tied.branches) == ([7, 8, 5], {1: [9, 5, 7, 9]})  # the branch runs on past k
    assert CopyDrafter(original, start=0).lookup([5], 3).branches == {}  # no branches asked for
    placed = CopyDrafter(original, start=0, branches=2).lookup([7, 8, 5], 2)  # "7 8 5" occurs once
    assert (placed.tokens, placed.branches) == ([7, 9], {})


def rewrite_prompt(target, code: str) -> tuple[list[int], list[int]]:
    """A prompt asking for `code` again, and `code`'s tokens: what the rewrite copies."""
    prompt = target.tokenize(f"Here is a function:\n\n{code}\nThe same function, written again:\n\n")
    return prompt, target.tokenize(code)


CODE = '''def mean_and_spread(values):
    """The mean of the values and their largest distance from it."""
    total = 0.0
    for value in values:
        total += value
    center = total / len(values)
    spread = max(abs(value - center) for value in values)
    return center, spread
'''


@pytest.mark.parametrize("draft_length", [None, 4, 16])
def test_with_single_token_verification_copy_drafting_is_plain_decoding(target, draft_length):
    """One token per target decode: the rewrite must be plain decoding's bit for bit, at
    the tuner's k and at fixed ones (long copies, rejected within)."""
    engine = Engine(target, None, n_ctx=2048, calibrate_s=0, exact=True)
    prompt, original = rewrite_prompt(target, CODE)
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=96, mode="target"))
    copied = generate(engine, GenerationRequest(prompt=prompt, max_tokens=96, mode="ngram", copy_from=original,
                                                draft_length=draft_length))
    assert copied.tokens == plain.tokens
    assert copied.stats.accepted > 0 and any(r[0] == "copy" for r in copied.stats.rounds)


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_copy_drafting_with_batched_verification_parts_from_plain_decoding_only_at_near_ties(target, mode):
    # A cost curve on which a verify batch of 32 costs 2.5 single steps (this CPU's
    # measured curve gives about 6.5; a GPU's about 1), held still so that the tuner's
    # choice does not move with the machine's load.
    curve = CostModel(verify_ms={n: 10.0 + 0.5 * n for n in range(1, 65)}, smoothing=0.0)
    engine = Engine(target, None, n_ctx=2048, costs=curve)
    prompt, original = rewrite_prompt(target, CODE)
    # smol copies the function's first 40 tokens or so, then writes its own.
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=40, mode="target", keep_logits=True))
    copied = generate(engine, GenerationRequest(prompt=prompt, max_tokens=40, mode=mode, copy_from=original,
                                                keep_logits=True))
    if copied.tokens != plain.tokens:
        gap = parting_gap(plain.logits, copied.logits.argmax(axis=1))
        assert gap is not None and gap < NEAR_TIE_LOGITS, f"parted where plain preferred its token by {gap}"
    copies = [r for r in copied.stats.rounds if r[0] == "copy"]
    # Verify batches cost less than their size in single steps: the tuner drafts long copies.
    assert copies and max(drafted for _, drafted, *_ in copies) >= 8, copied.stats.rounds
    assert copied.stats.tokens_per_pass > 2, copied.stats.tokens_per_pass


CLAMP = '''def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value


def clamp_all(values, low, high):
    result = []
    for value in values:
        result.append(clamp(value, low, high))
    return result
'''


def test_a_rewrite_of_lines_written_twice_verifies_both_copies_in_one_pass(target):
    """`if value`, `return` and `low, high` occur more than once in the function: where the
    copy's place is ambiguous, the other place's continuation is a token-tree branch, and
    the output is still plain decoding's (but for near ties)."""
    curve = CostModel(verify_ms={n: 10.0 + 0.5 * n for n in range(1, 65)}, smoothing=0.0)  # held still, as above
    engine = Engine(target, None, n_ctx=2048, costs=curve)
    prompt, original = rewrite_prompt(target, CLAMP)
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=80, mode="target", keep_logits=True))
    copied = generate(engine, GenerationRequest(prompt=prompt, max_tokens=80, mode="ngram",
                                                copy_from=original))  # trees: no logits kept
    if copied.tokens != plain.tokens:
        gap = parting_gap(plain.logits, np.array(copied.tokens))
        assert gap is not None and gap < NEAR_TIE_LOGITS, f"parted where plain preferred its token by {gap}"
    assert copied.stats.tree_rounds > 0 and copied.stats.branch_rows > 0, copied.stats

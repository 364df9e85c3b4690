"""The tuner's pieces and the n-gram index, on synthetic data."""

import itertools
import operator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from completer.config import DraftingOptions
from completer.engine.documents import Documents
from completer.engine.drafts import NgramDrafter, NgramIndex
from completer.engine.kv import common_prefix_length
from completer.engine.speculative import Branch
from completer.engine.tuning import (AcceptanceCurve, Candidate, Continuation, CostModel, Plan, Trial, Tuner,
                                     best_plan, match_bucket, with_branches)

MIN_MATCH, MAX_MATCH = DraftingOptions().ngram_min_match, DraftingOptions().ngram_max_match
# A CPU-like cost curve in ms: batches of 4 and 8 are cheaper than their neighbours, as
# llama.cpp's batched kernels make them on a CPU (docs/bench.md shows measured curves).
CPU_CURVE = {1: 10.0, 2: 15.9, 3: 19.5, 4: 19.7, 5: 25.2, 6: 29.2, 7: 33.3, 8: 26.0, 9: 34.0, 10: 35.7}
# Larger batches, each cheaper per token than the last.
LONG_CPU_CURVE = {**CPU_CURVE, 12: 33.7, 16: 37.9, 24: 54.3, 32: 66.6, 48: 99.0, 64: 131.0}


def geometric(a: float, most: int) -> list[float]:
    """The survival of a constant per-token acceptance a: a, a^2, ..."""
    return [a**i for i in range(1, most + 1)]


def test_the_plan_prefers_batch_sizes_cheaper_than_their_neighbours():
    costs = CostModel(verify_ms=dict(CPU_CURVE))
    plan = best_plan(costs, [("ngram", geometric(0.9, 9))])
    assert plan.provider == "ngram"
    assert plan.k + 1 == 8  # batch 8 costs less than batch 7
    assert plan.predicted_tokens == pytest.approx((1 - 0.9**8) / 0.1)


def test_speculation_is_refused_when_it_does_not_pay():
    costs = CostModel(verify_ms=dict(CPU_CURVE), draft_token_ms={"draft": 2.2})
    assert best_plan(costs, [("draft", geometric(0.3, 8))]).provider is None
    assert best_plan(costs, []).provider is None
    assert best_plan(costs, [("draft", geometric(0.85, 8))]).provider == "draft"


def test_unmeasured_batch_sizes_are_interpolated():
    costs = CostModel(verify_ms={1: 10.0, 4: 16.0})
    assert costs.verify(2) == pytest.approx(12.0)
    assert costs.verify(6) == pytest.approx(20.0)
    assert CostModel().verify(3) == 3.0


def test_the_acceptance_curve_learns_each_position_given_the_ones_before():
    curve = AcceptanceCurve()
    for round_ in range(300):
        curve.record(accepted=3 if round_ % 2 else 8, drafted=8)  # every round held 3; half of them all 8
    rates = curve.rates(10, prior=0.1)
    assert min(rates[:3]) > 0.9
    assert rates[3] == pytest.approx(0.5, abs=0.05)  # the 4th held in half the rounds that reached it
    assert min(rates[4:8]) > 0.9  # and then the rest held
    # Position 9 was never tried: it is trusted as far as the 8th.
    assert rates[8] == rates[7]
    kept = curve.survival(10, prior=0.1)
    assert kept[7] == pytest.approx(rates[0] * rates[1] * rates[2] * rates[3] * rates[4] * rates[5] * rates[6]
                                    * rates[7])
    for _ in range(300):
        curve.record(accepted=0, drafted=4)
    assert curve.rates(1, prior=0.1)[0] < 0.05  # it forgets


def test_a_long_copy_that_keeps_holding_is_drafted_past_16_tokens():
    """Rounds of n-gram copies after a 32-token match that hold for 30 tokens: the curve
    says the 17th to 30th tokens hold too, and a batch of 31 costs 6.5 steps for 31
    tokens, so the plan goes past the 16 a constant-rate model and the old cap allowed."""
    tuner = Tuner(CostModel(verify_ms=dict(LONG_CPU_CURVE)), DraftingOptions())
    bucket = match_bucket(32)
    for _ in range(40):
        tuner.acceptance.record("ngram", "doc", "py", bucket, accepted=30, drafted=40)
    kept = tuner.acceptance.survival("ngram", "doc", "py", bucket, 48)
    assert kept[29] > 0.8 and kept[30] < 0.1  # the 31st is where the copies stopped
    plan = best_plan(tuner.costs, [("ngram", kept)])
    assert plan.provider == "ngram" and plan.k == 30
    assert plan.predicted_tokens > 25
    # The same copies counted as one rate per token (accepted / (accepted + rejections),
    # 30/31 here) would predict the stop nowhere: with a rate of 0.6 the plan stays short.
    assert best_plan(tuner.costs, [("ngram", geometric(0.6, 48))]).k < 10


def test_a_short_match_that_fails_early_is_not_planned_long():
    tuner = Tuner(CostModel(verify_ms=dict(LONG_CPU_CURVE)), DraftingOptions())
    for _ in range(40):
        tuner.acceptance.record("ngram", "doc", "py", match_bucket(3), accepted=1, drafted=8)
    plan = tuner.plan([Candidate("ngram", match_bucket(3), 48)], "doc", "py")
    assert plan.k <= 3


def test_a_documents_next_edits_teach_its_completions_nothing():
    """A rewrite's long copies, learnt while the document's next-edit caches are live,
    leave the plan of its completions (their caches live) where it was, in the document's
    curves and in its language's."""
    documents = Documents()
    tuner = Tuner(CostModel(verify_ms=dict(LONG_CPU_CURVE)), DraftingOptions(), documents)
    candidate = [Candidate("ngram", match_bucket(32), 48)]
    documents.live = ("doc", False)
    before = tuner.plan(candidate, "doc", "py")
    documents.live = ("doc", True)
    for _ in range(40):
        tuner.acceptance.record("ngram", "doc", "py", match_bucket(32), accepted=30, drafted=40)
    assert tuner.plan(candidate, "doc", "py").k == 30  # the next edits' own curve learnt the copies
    documents.live = ("doc", False)
    assert tuner.plan(candidate, "doc", "py") == before  # its own curve untried: the language's, untaught


def test_a_copy_drafted_short_that_goes_on_holding_is_soon_drafted_long():
    """A line written over and over, copied by n-gram lookup from 64-token matches, where
    copies once failed at their 3rd token. Every round keeps its whole draft. Checking
    each round's proposal past its k against the tokens the target goes on to make
    teaches the positions past k, and k grows within a few rounds; without it, the
    positions past k are never tried and k stays where it was."""
    bucket = match_bucket(64)
    line = [19, 198] * 400

    def ks(follow: bool) -> list[int]:
        tuner = Tuner(CostModel(verify_ms=dict(LONG_CPU_CURVE)), DraftingOptions())
        for _ in range(20):
            tuner.acceptance.record("ngram", "doc", "py", bucket, accepted=2, drafted=8)
        made, chosen = 0, []
        for _ in range(10):
            k = tuner.plan([Candidate("ngram", bucket, 63)], "doc", "py").k
            chosen.append(k)
            tuner.observe(Trial("ngram", bucket, k, k, k + 1, tuner.costs.verify(k + 1), 0.0), "doc", "py")
            if follow:
                proposed_past_k = Continuation("ngram", bucket, k, tuple(line[made + k:made + 63]))
                tuner.follow(line[made:made + k + 1], proposed_past_k, "doc", "py")
            made += k + 1
        return chosen

    assert max(ks(follow=True)) > 16
    assert max(ks(follow=False)) <= 3


def test_a_continuation_is_a_trial_at_each_position_it_was_checked_and_ends_where_it_parts():
    tuner = Tuner(CostModel(verify_ms=dict(LONG_CPU_CURVE)), DraftingOptions())
    curve = tuner.acceptance.curve("copy", "doc", "py", 0)
    # A round kept its 2 drafted tokens; its proposal went on 5, 6, 7, 8. It made 1, 2 and 5.
    tuner.follow([1, 2, 5], Continuation("copy", 0, 2, (5, 6, 7, 8)), "doc", "py")
    assert curve.trials[:4] == [0.0, 0.0, 1.0, 0.0] and curve.accepted[2] == 1.0  # position 3 held
    tuner.follow([6, 9], None, "doc", "py")  # the next round made 6, then 9 where 7 was proposed
    assert curve.trials[3:6] == [1.0, 1.0, 0.0] and curve.accepted[3:5] == [1.0, 0.0]
    assert tuner.continuations == []  # it parted: nothing more to check
    tuner.follow([3, 9], Continuation("copy", 0, 1, (4, 5)), "doc", "py")  # drafted 3, kept; 9 where 4 was proposed
    assert curve.trials[1] == 1.0 and curve.accepted[1] == 0.0 and tuner.continuations == []


def test_a_branch_is_verified_only_where_its_rows_cost_less_than_it_is_expected_to_make():
    """A draft whose 4th token is a coin toss, with a branch offered there. On a flat cost curve (a
    GPU's) the branch's 6 rows are free and it is taken whole; nor does a branch that
    never starts right (hit 0) go in. On the CPU's curve a draft of 7 is a batch of 8,
    cheaper than its neighbours: no branch pays for leaving that, even a sure one; a
    draft of 8 is a batch of 9, dearer than 12, and there rows pay for themselves."""
    rates = [0.9, 0.9, 0.9, 0.5, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    flat = CostModel(verify_ms={n: 10.0 for n in range(1, 65)})

    def chain(costs: CostModel, k: int) -> Plan:
        return Plan("index", k, 1 + sum(itertools.accumulate(rates[:k], operator.mul)), costs.verify(k + 1))

    offered = [Branch(3, [20, 21, 22, 23, 24, 25])]  # replacing the 4th drafted token on
    tree = with_branches(flat, chain(flat, 8), rates, offered, hit=0.5, room=20, rows=20)
    assert tree.branches == (offered[0],) and tree.predicted_tokens > chain(flat, 8).predicted_tokens
    # The context's cells, and the tokens the round may still make, bound the branch: its first tokens stay.
    assert with_branches(flat, chain(flat, 8), rates, offered, hit=0.5, room=20, rows=2).branches == (
        Branch(3, [20, 21]),)
    assert with_branches(flat, chain(flat, 8), rates, offered, hit=0.5, room=5, rows=20).branches == (
        Branch(3, [20, 21]),)
    assert with_branches(flat, chain(flat, 8), rates, offered, hit=0.0, room=20, rows=20) == chain(flat, 8)
    # A branch from past the draft has nothing to replace.
    past = [Branch(9, offered[0].tokens)]
    assert with_branches(flat, chain(flat, 8), rates, past, hit=0.5, room=20, rows=20) == chain(flat, 8)
    cpu = CostModel(verify_ms=dict(LONG_CPU_CURVE))
    assert with_branches(cpu, chain(cpu, 7), rates, offered, hit=1.0, room=20, rows=20) == chain(cpu, 7)
    assert with_branches(cpu, chain(cpu, 8), rates, offered, hit=1.0, room=20, rows=20).branches


def brute_force_longest(tokens: list[int], before: int) -> int:
    best = 0
    for end in range(MIN_MATCH, before):
        length = 0
        while length < min(MAX_MATCH, end) and tokens[end - 1 - length] == tokens[len(tokens) - 1 - length]:
            length += 1
        if length >= MIN_MATCH:
            best = max(best, length)
    return best


@given(st.lists(st.integers(0, 3), min_size=0, max_size=80))
def test_the_index_finds_the_longest_earlier_match(tokens):
    index = NgramIndex(tokens[: len(tokens) // 2])
    index.extend(tokens[len(tokens) // 2 :])  # built in two steps, as a growing text is
    length, end = index.longest_match(tokens, len(tokens)) if len(tokens) >= MIN_MATCH else (0, -1)
    expected = brute_force_longest(tokens, len(tokens)) if len(tokens) >= MIN_MATCH else 0
    # The index examines the 32 most recent candidates only, so on repetitive text it
    # may settle for a shorter match; never for a wrong one.
    assert length <= expected
    if length:
        assert tokens[end - length : end] == tokens[len(tokens) - length :]
        assert end < len(tokens)


def test_lookup_proposes_what_followed_the_match_here_or_in_another_document():
    drafter = NgramDrafter()
    text = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4]
    assert drafter.lookup(text, 3)[:2] == ([5, 6, 7], 4)
    drafter.set_other_document("other.py", [20, 21, 22, 23, 24, 25])
    assert drafter.lookup([9, 9, 21, 22, 23], 2)[:2] == ([24, 25], 3)
    drafter.remove_other_document("other.py")
    assert drafter.lookup([9, 9, 21, 22, 23], 2)[:2] == ([], 0)


def test_a_match_that_runs_into_the_texts_end_is_copied_on_from_itself():
    """A text that repeats (a line written over and over): the latest occurrence of its
    end is followed by the text's end, and the proposal goes on from itself, as far as
    asked (LZ77's overlapping copy), not only to the text's end."""
    drafter = NgramDrafter()
    assert drafter.lookup([5, 1, 2, 1, 2, 1, 2, 1, 2], 7)[:2] == ([1, 2, 1, 2, 1, 2, 1], 6)
    assert drafter.lookup([9, 8, 1, 2, 3, 4, 7, 1, 2, 3, 4, 7, 1, 2, 3], 8)[:2] == ([4, 7, 1, 2, 3, 4, 7, 1], 8)
    # Another document's text does not go on into this one: its match is not extended.
    drafter.set_other_document("other.py", [20, 21, 22, 23])
    assert drafter.lookup([9, 9, 20, 21, 22], 4)[:2] == ([23], 3)


@given(st.lists(st.integers(0, 2), max_size=12), st.lists(st.integers(0, 2), max_size=12))
def test_common_prefix_length(a, b):
    n = common_prefix_length(a, b)
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]


def test_the_minimum_match_is_an_option_that_applies_to_every_index():
    repeated = [7, 8, 9, 10, 11]
    tokens = [1, 2, *repeated, 50, 3, 4, *repeated]  # the last 5 tokens occurred before, followed by 50
    drafter = NgramDrafter(DraftingOptions(ngram_min_match=6))
    assert drafter.lookup(tokens, 4)[:2] == ([], 0)
    drafter.set_other_document("other", [1, *repeated, 60])
    drafter.configure(DraftingOptions(ngram_min_match=5))
    proposed, length, _ = drafter.lookup(tokens, 1)
    assert length == 5 and proposed in ([50], [60])

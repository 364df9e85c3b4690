"""The acceptance rule in isolation, on synthetic distributions: whatever the draft
proposes, the token that comes out is distributed as the target's p."""

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from completer.engine.speculative import (Branch, Sampling, accept_tree, acceptance_probability, expected_tokens,
                                          probabilities, residual, verify_greedy, verify_sampled)

V = 6

CASES = {
    "q equals p": (np.array([0.1, 0.2, 0.3, 0.25, 0.1, 0.05]), np.array([0.1, 0.2, 0.3, 0.25, 0.1, 0.05])),
    "disjoint supports": (np.array([0.5, 0.5, 0, 0, 0, 0]), np.array([0, 0, 0, 0.2, 0.3, 0.5])),
    "overlapping": (np.array([0.05, 0.6, 0.05, 0.1, 0.1, 0.1]), np.array([0.4, 0.1, 0.1, 0.1, 0.2, 0.1])),
    "draft sharper": (np.array([0.2, 0.2, 0.2, 0.2, 0.1, 0.1]), np.array([0.9, 0.02, 0.02, 0.02, 0.02, 0.02])),
}


def first_token_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Exactly what the rule outputs for one drafted token d ~ q, using the engine's own
    acceptance_probability and residual: sum over d of q(d) [acc(d) 1_d + (1 - acc(d)) r_d]."""
    out = np.zeros_like(p)
    for token in np.flatnonzero(q):
        accept = acceptance_probability(p, q, token)
        rest = residual(p, q, token)
        out[token] += q[token] * accept
        out += q[token] * (1 - accept) * rest / rest.sum()
    return out


@pytest.mark.parametrize("case", CASES)
def test_the_output_distribution_is_p_exactly(case):
    p, q = CASES[case]
    np.testing.assert_allclose(first_token_distribution(p, q), p, atol=1e-12)


@settings(max_examples=200)
@given(st.lists(st.floats(0, 1), min_size=V, max_size=V), st.lists(st.floats(0, 1), min_size=V, max_size=V),
       st.integers(0, V - 1))
def test_the_output_distribution_is_p_for_any_p_and_q(p_weights, q_weights, point):
    p, q = np.array(p_weights), np.array(q_weights)
    if p.sum() == 0 or q.sum() == 0:
        return
    p, q = p / p.sum(), q / q.sum()
    np.testing.assert_allclose(first_token_distribution(p, q), p, atol=1e-9)
    # A deterministic proposal of any fixed token: accept with p(d), else p without d.
    accept = acceptance_probability(p, None, point)
    rest = residual(p, None, point)
    mixed = accept * np.eye(V)[point] + (1 - accept) * rest / rest.sum()
    np.testing.assert_allclose(mixed, p, atol=1e-9)


@pytest.mark.slow  # statistical: sampled, then a chi-square test
@pytest.mark.parametrize("case", CASES)
def test_monte_carlo_of_the_real_verifier_matches_p(case):
    """verify_sampled itself, drafting d ~ q, over 20,000 draws: chi-square against p."""
    p, q = CASES[case]
    rng = np.random.default_rng(7)
    target = np.stack([p, p])  # [k+1, V] with k = 1
    counts = np.zeros(V)
    for _ in range(20_000):
        drafted = int(rng.choice(V, p=q))
        accepted, next_token = verify_sampled(target, q[None, :], [drafted], rng)
        counts[drafted if accepted else next_token] += 1
    support = p > 0
    assert counts[~support].sum() == 0
    assert chisquare(counts[support], p[support] * counts.sum()).pvalue > 0.001


# A three-token language in which each token's distribution depends on the one before:
# TARGET[prev] is p, DRAFT[prev] is q (overlapping p partially, sharper on some rows,
# flatter on others). prev = 3 is the start.
TARGET = np.array([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7], [0.3, 0.4, 0.3], [0.5, 0.25, 0.25]])
DRAFT = np.array([[0.2, 0.3, 0.5], [0.8, 0.1, 0.1], [0.3, 0.4, 0.3], [0.1, 0.8, 0.1]])
START = 3


def speculative_text(length: int, k: int, point_mass: bool, rng: np.random.Generator) -> tuple[int, ...]:
    """`length` tokens by rounds of up to k drafted tokens, as the engine runs them: the
    draft samples its chain from q (or proposes its argmax chain, as a point mass), the
    target's rows follow the drafted tokens, then the verifier decides."""
    text: list[int] = []
    while len(text) < length:
        previous = [text[-1] if text else START]
        draft = []
        for _ in range(min(k, length - len(text) - 1)):
            row = DRAFT[previous[-1]]
            draft.append(int(row.argmax()) if point_mass else int(rng.choice(3, p=row)))
            previous.append(draft[-1])
        p = TARGET[previous]  # [len(draft) + 1, V]: the target's row after each token
        q = None if point_mass else DRAFT[previous[:-1]]  # [len(draft), V]
        accepted, next_token = verify_sampled(p, q, draft, rng)
        text += [*draft[:accepted], next_token]
    return tuple(text[:length])


@pytest.mark.slow  # statistical: sampled, then a chi-square test
@pytest.mark.parametrize("point_mass", [False, True], ids=["model draft", "point mass"])
def test_chains_of_drafted_tokens_have_the_targets_joint_distribution(point_mass):
    """k = 3, three tokens: all 27 sequences against the target's exact joint
    probabilities, by chi-square on 20,000 draws."""
    rng = np.random.default_rng(11)
    counts = Counter(speculative_text(3, 3, point_mass, rng) for _ in range(20_000))
    cells = list(itertools.product(range(3), repeat=3))
    exact = [TARGET[START, a] * TARGET[a, b] * TARGET[b, c] for a, b, c in cells]
    observed = [counts[cell] for cell in cells]
    assert chisquare(observed, np.array(exact) * sum(observed)).pvalue > 0.001


def test_greedy_accepts_while_the_draft_is_the_argmax():
    logits = np.array([[0, 5, 1], [4, 0, 1], [0, 0, 9], [1, 2, 3]], dtype=float)
    assert verify_greedy(logits, [1, 0, 2]) == (3, 2)
    assert verify_greedy(logits, [1, 2, 2]) == (1, 0)
    assert verify_greedy(logits, [0, 0, 2]) == (0, 1)
    assert verify_greedy(logits[:1], []) == (0, 1)


def greedy_rows(greedy: list[int], path: list[int], noise: int) -> np.ndarray:
    """A target whose greedy text is `greedy`: its argmax after each token of `path`
    (scored after the text before it, [last, path...]), where the path is still the
    greedy text; off it, any token (`noise`): the rule must not read those rows."""
    return np.array([greedy[i] if path[:i] == greedy[:i] and i < len(greedy) else noise
                     for i in range(len(path) + 1)])


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=12, max_size=12), st.lists(st.integers(0, 3), max_size=8),
       st.lists(st.tuples(st.integers(0, 7), st.lists(st.integers(0, 3), min_size=1, max_size=6)), max_size=3),
       st.integers(0, 3))
def test_a_token_tree_yields_the_targets_greedy_text_as_far_as_any_branch_verifies(greedy, draft, offered, noise):
    """A target that writes `greedy`; a draft and branches (step, tokens) replacing it
    from d(step+1): the tokens produced are the greedy text, and as many as the best
    verified path gives (the draft's, or a branch's that starts where the draft parted)."""
    branches = [Branch(step, tokens) for step, tokens in offered if step < len(draft)]
    best = greedy_rows(greedy, draft, noise)
    branch_best = [greedy_rows(greedy, draft[:step] + tokens, noise)[step + 1:] for step, tokens in branches]
    verdict = accept_tree(best, draft, branches, branch_best)
    produced = draft[: verdict.accepted] + verdict.branch_tokens + [verdict.next_token]
    assert produced == greedy[: len(produced)]
    if verdict.branch_index is not None:  # the branch taken, by its 0-based index in the list verified
        taken = branches[verdict.branch_index]
        assert taken.step == verdict.accepted and taken.tokens[: len(verdict.branch_tokens)] == verdict.branch_tokens
    accepted = next((i for i, token in enumerate(draft) if token != greedy[i]), len(draft))
    longest = accepted  # the draft's verified tokens, or a branch's after them
    for step, tokens in branches:
        if step == accepted < len(draft):
            path = draft[:step] + tokens
            longest = max(longest, next((i for i, token in enumerate(path) if token != greedy[i]), len(path)))
    assert len(produced) == longest + 1


def test_temperature_top_k_and_top_p_warp_the_distribution():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    np.testing.assert_allclose(probabilities(logits, Sampling(temperature=1.0)), [[0.5, 0.3, 0.15, 0.05]])
    np.testing.assert_allclose(probabilities(logits, Sampling(temperature=1.0, top_k=2)), [[0.625, 0.375, 0, 0]])
    np.testing.assert_allclose(probabilities(logits, Sampling(temperature=1.0, top_p=0.7)), [[0.625, 0.375, 0, 0]])
    sharper = probabilities(logits, Sampling(temperature=0.5))[0]
    assert sharper[0] > 0.5 and np.isclose(sharper.sum(), 1)


def test_expected_tokens_per_round():
    assert expected_tokens(0.7, 4) == pytest.approx(2.7731)
    assert expected_tokens(0.8, 3) == pytest.approx(2.952)
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0

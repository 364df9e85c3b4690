"""The acceptance rule in isolation, on synthetic distributions: whatever the draft
proposes, the token that comes out is distributed as the target's p."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from completer.speculative import (
    Sampling,
    acceptance_probability,
    expected_tokens,
    probabilities,
    residual,
    verify_greedy,
    verify_sampled,
)

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


def test_a_chain_of_drafted_tokens_follows_p_at_every_position():
    """k = 3 with a point-mass draft: each output position is distributed as its p."""
    p = np.array([[0.7, 0.2, 0.1, 0, 0, 0], [0.1, 0.1, 0.8, 0, 0, 0], [0.3, 0.3, 0.4, 0, 0, 0],
                  [0.2, 0.2, 0.2, 0.2, 0.1, 0.1]])
    draft = [0, 2, 1]
    rng = np.random.default_rng(11)
    first = np.zeros(V)
    for _ in range(20_000):
        accepted, next_token = verify_sampled(p, None, draft, rng)
        first[draft[0] if accepted else next_token] += 1
    assert chisquare(first[:3], p[0, :3] * first.sum()).pvalue > 0.001


def test_greedy_accepts_while_the_draft_is_the_argmax():
    logits = np.array([[0, 5, 1], [4, 0, 1], [0, 0, 9], [1, 2, 3]], dtype=float)
    assert verify_greedy(logits, [1, 0, 2]) == (3, 2)
    assert verify_greedy(logits, [1, 2, 2]) == (1, 0)
    assert verify_greedy(logits, [0, 0, 2]) == (0, 1)
    assert verify_greedy(logits[:1], []) == (0, 1)


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

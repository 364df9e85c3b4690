"""Speculative decoding as small pure functions.

A round: the draft proposes d1..dk with probabilities q; the target scores
[last, d1..dk] in one batch, giving p1..p(k+1). Left to right, accept di with
probability min(1, p(di) / q(di)); at the first rejection sample the next token
from norm(max(0, p - q)) and stop; if all k are accepted, sample a bonus token from
p(k+1). The tokens produced are distributed exactly as the target's own samples
(Leviathan et al. 2022, sections 2-3). At temperature 0 this is: accept while di is
the target's argmax, then take the target's argmax.

A deterministic proposal (n-gram lookup) is a point mass: q(di) = 1, so di is
accepted with probability p(di), and the residual is p without di.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# At temperature 0, speculative output may part from plain decoding only where plain
# decoding's own logits nearly tie the two tokens that parted: plain steps score one
# token per pass and verification scores k+1 in one batch, and llama.cpp's kernels for
# the two sum in other orders. The bound leaves room above the largest parting
# `python -m benchmarks.numerics` measured (docs/speculative-decoding.md, "Measurements
# behind the engine's constants"). With exact verification (LlamaContext
# single_token_eval) no parting is allowed.
NEAR_TIE_LOGITS = 0.5


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 = greedy: the target's argmax, deterministic
    top_k: int = 0  # keep the k most likely tokens; 0 = all
    top_p: float = 1.0  # keep the smallest set holding this much probability
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def probabilities(logits: np.ndarray, sampling: Sampling) -> np.ndarray:
    """Logits [n, V] -> probabilities [n, V] after temperature, top-k and top-p.

    The target's p and the draft's q go through this same warp, so acceptance
    compares the distributions the user asked to sample from.
    """
    scaled = logits.astype(np.float64) / sampling.temperature  # [n, V]
    if 0 < sampling.top_k < scaled.shape[1]:
        kth = np.partition(scaled, -sampling.top_k, axis=1)[:, -sampling.top_k, None]
        scaled = np.where(scaled >= kth, scaled, -np.inf)
    scaled -= scaled.max(axis=1, keepdims=True)
    p = np.exp(scaled)
    p /= p.sum(axis=1, keepdims=True)
    if sampling.top_p < 1.0:
        order = np.argsort(-p, axis=1)
        sorted_p = np.take_along_axis(p, order, axis=1)
        # Keep a token while the mass before it is below top_p: the top token always stays.
        keep_sorted = np.cumsum(sorted_p, axis=1) - sorted_p < sampling.top_p
        keep_sorted[:, 0] = True  # the top token stays at top_p 0 too
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=1)
        p = np.where(keep, p, 0.0)
        p /= p.sum(axis=1, keepdims=True)
    return p


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """One token from a distribution [V]."""
    return int(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right").clip(0, len(p) - 1))


def verify_greedy(target_logits: np.ndarray, draft: list[int]) -> tuple[int, int]:
    """Temperature 0. target_logits [k+1, V] scored [last, d1..dk].
    Returns (accepted count, the target's next token after them)."""
    return accept_greedy(target_logits.argmax(axis=1), draft)


def accept_greedy(best: np.ndarray, draft: list[int]) -> tuple[int, int]:
    """Temperature 0, from the target's argmax at each of [last, d1..dk] ([k+1]).
    Returns (accepted count, the target's next token after them)."""
    accepted = 0
    while accepted < len(draft) and draft[accepted] == best[accepted]:
        accepted += 1
    return accepted, int(best[accepted])


class Branch(NamedTuple):
    """A token tree's branch: tokens that replace a draft from its step `step` on
    (0-based: the draft's tokens before that step stay, `tokens[0]` stands for d(step+1))."""

    step: int
    tokens: list[int]


class TreeVerdict(NamedTuple):
    accepted: int  # draft tokens accepted
    branch_index: int | None  # the taken branch's index in the verified branches (0-based), if one was
    branch_tokens: list[int]  # that branch's tokens accepted: its first is the target's token at the parting
    next_token: int  # the target's token after all of those


def accept_tree(best: np.ndarray, draft: list[int], branches: Sequence[Branch],
                branch_best: list[np.ndarray]) -> TreeVerdict:
    """Temperature 0, a token tree: the draft d1..dk, and branches beside it. best [k+1]
    is the target's argmax at each of [last, d1..dk], branch_best[j] [m] at each of
    branch j's m tokens. Where the draft parts from the target at a step with a branch
    whose first token is the target's, that branch goes on as a draft of its own; the
    result is the target's greedy text either way."""
    accepted, next_token = accept_greedy(best, draft)
    for index, (branch, rows) in enumerate(zip(branches, branch_best)):
        if branch.step == accepted < len(draft) and branch.tokens[0] == next_token:
            more, next_token = accept_greedy(rows, branch.tokens[1:])
            return TreeVerdict(accepted, index, branch.tokens[: more + 1], next_token)
    return TreeVerdict(accepted, None, [], next_token)


def first_parting(plain: np.ndarray, other: np.ndarray) -> int | None:
    """The first index at which two token sequences differ, within the shorter; None if
    there is none."""
    n = min(len(plain), len(other))
    parted = np.flatnonzero(np.asarray(plain[:n]) != np.asarray(other[:n]))  # [parts]
    return int(parted[0]) if parted.size else None


def parting_gap(plain_logits: np.ndarray, other: np.ndarray) -> float | None:
    """Where another greedy run of the same prompt first chose a token other than plain
    decoding did, plain's own logit of its token less its logit of the other's: a flip
    by numerics needs this to be small, and no third evaluation is needed to judge it.
    plain_logits [n, V] are the rows that chose plain's tokens (their argmaxes), and
    `other` [m] the other run's tokens; both include an end-of-generation token that
    stopped them (generate(keep_logits=True) keeps its row). None if they never part."""
    plain = plain_logits.argmax(axis=1)  # [n]
    at = first_parting(plain, other)
    if at is None:
        return None
    return float(plain_logits[at, plain[at]] - plain_logits[at, other[at]])


def acceptance_probability(p: np.ndarray, q: np.ndarray | None, token: int) -> float:
    """min(1, p(token) / q(token)) for rows p, q [V]; q None is a point mass on token."""
    q_token = 1.0 if q is None else q[token]
    return 1.0 if q_token <= p[token] else p[token] / q_token


def residual(p: np.ndarray, q: np.ndarray | None, token: int) -> np.ndarray:
    """What to sample from after rejecting token: norm(max(0, p - q)), unnormalised [V]."""
    if q is None:
        rest = p.copy()
        rest[token] = 0.0
    else:
        rest = np.maximum(p - q, 0.0)
    # Empty only by rounding, when p and q agree wherever p has mass.
    return rest if rest.sum() > 0.0 else p


def verify_sampled(
    p: np.ndarray, q: np.ndarray | None, draft: list[int], rng: np.random.Generator
) -> tuple[int, int]:
    """Modified rejection sampling. p [k+1, V] from the target, q [k, V] from the draft
    (None: the draft is a point mass on each di). Returns (accepted count, next token)."""
    for i, token in enumerate(draft):
        if rng.random() >= acceptance_probability(p[i], None if q is None else q[i], token):
            return i, sample(residual(p[i], None if q is None else q[i], token), rng)
    return len(draft), sample(p[len(draft)], rng)


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens one round yields: E = (1 - a^(k+1)) / (1 - a), counting the target's own token."""
    if acceptance >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)

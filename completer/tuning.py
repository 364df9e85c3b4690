"""Choosing k, and whether to speculate at all, from measurement.

Speculation pays when the tokens a round is expected to yield, E(a, k), cost less
per token than plain steps:

    E(a, k) / (draft_ms(k) + verify_ms(k + 1))  >  1 / verify_ms(1)

verify_ms(n) is measured per batch size: on a CPU it grows with n and is not even
monotone (smol's Q4_0 target after 900 tokens: a batch of 8 costs 2.60 steps, one of
7 costs 3.33), so a k whose batch is cheap for its size can win. a is the
per-token acceptance rate, estimated online per provider and per document and
language (and, for n-gram lookup, per match length: long matches are better bets).
"""

import math
import time
from dataclasses import dataclass, field

from completer.config import DraftingOptions
from completer.speculative import expected_tokens

MAX_DRAFT = 15  # verify batches up to 16 tokens; past that a CPU pass costs more than it can yield
# Exponential forgetting of old rounds: roughly the last 1/(1-DECAY) trials count.
DECAY = 0.97
# Until this many trials are recorded for a document, its language's estimate is used.
MIN_TRIALS = 8.0


@dataclass
class CostModel:
    """Milliseconds of one target pass per batch size, and of drafting, from real runs."""

    verify_ms: dict[int, float] = field(default_factory=dict)  # batch size -> ms
    draft_token_ms: dict[str, float] = field(default_factory=dict)  # provider -> ms per drafted token
    smoothing: float = 0.2

    def record_verify(self, n: int, ms: float) -> None:
        old = self.verify_ms.get(n)
        self.verify_ms[n] = ms if old is None else old + self.smoothing * (ms - old)

    def record_draft(self, provider: str, k: int, ms: float) -> None:
        if k <= 0:
            return
        old = self.draft_token_ms.get(provider)
        per_token = ms / k
        self.draft_token_ms[provider] = per_token if old is None else old + self.smoothing * (per_token - old)

    def verify(self, n: int) -> float:
        """Measured cost of a batch of n; unmeasured sizes are interpolated linearly
        between the nearest measured ones (extrapolated from the largest two)."""
        if n in self.verify_ms:
            return self.verify_ms[n]
        sizes = sorted(self.verify_ms)
        if not sizes:
            return float(n)  # no data: assume cost grows with n, which keeps k small
        below = [s for s in sizes if s < n]
        above = [s for s in sizes if s > n]
        if below and above:
            a, b = below[-1], above[0]
        elif len(sizes) >= 2:
            a, b = (sizes[-2], sizes[-1]) if below else (sizes[0], sizes[1])
        else:
            return self.verify_ms[sizes[0]] * n / sizes[0]
        slope = (self.verify_ms[b] - self.verify_ms[a]) / (b - a)
        return max(self.verify_ms[a] + slope * (n - a), 1e-3)

    def draft(self, provider: str, k: int) -> float:
        return self.draft_token_ms.get(provider, 0.0) * k


@dataclass
class Acceptance:
    """A running estimate of the per-token acceptance rate a. Each drafted token up to the
    first rejection is one trial that succeeds with probability a, so the estimate is
    accepted / (accepted + rejections), over exponentially decayed counts."""

    accepted: float = 0.0
    trials: float = 0.0

    def record(self, accepted: int, drafted: int) -> None:
        rejected = 1 if accepted < drafted else 0
        self.accepted = self.accepted * DECAY**drafted + accepted
        self.trials = self.trials * DECAY**drafted + accepted + rejected

    def rate(self, prior: float) -> float:
        # Two pseudo-trials at the prior keep a fresh estimate from swinging to 0 or 1.
        return (self.accepted + 2 * prior) / (self.trials + 2)


# Acceptance before anything is measured: optimistic enough to try speculating.
PRIORS = {"draft": 0.6, "ngram": 0.5}


def match_bucket(match_length: int) -> int:
    """n-gram matches grouped by length: 3, 4-5, 6-8, 9+ tokens."""
    return 0 if match_length < 4 else 1 if match_length < 6 else 2 if match_length < 9 else 3


@dataclass
class AcceptanceTable:
    """Estimates of a per (provider, bucket), for each document and each language."""

    by_key: dict[tuple[str, str, int], Acceptance] = field(default_factory=dict)

    def _get(self, provider: str, scope: str, bucket: int) -> Acceptance:
        return self.by_key.setdefault((provider, scope, bucket), Acceptance())

    def record(self, provider: str, document: str, language: str, bucket: int, accepted: int, drafted: int) -> None:
        for scope in (f"doc:{document}", f"lang:{language}"):
            self._get(provider, scope, bucket).record(accepted, drafted)

    def rate(self, provider: str, document: str, language: str, bucket: int) -> float:
        prior = PRIORS.get(provider, 0.5)
        document_estimate = self._get(provider, f"doc:{document}", bucket)
        if document_estimate.trials >= MIN_TRIALS:
            return document_estimate.rate(prior)
        return self._get(provider, f"lang:{language}", bucket).rate(prior)


@dataclass(frozen=True)
class Plan:
    provider: str | None  # None: a plain target step
    k: int
    predicted_tokens: float  # E for the plan (1 for a plain step)
    predicted_ms: float


def best_plan(costs: CostModel, options: list[tuple[str, float, int]],
              margin: float = DraftingOptions().margin) -> Plan:
    """The plan with the most expected tokens per ms, if it beats plain decoding by
    `margin` (drafting.margin). options: (provider, a, most k)."""
    plain = Plan(None, 0, 1.0, costs.verify(1))
    best, best_rate = plain, (1.0 + margin) / plain.predicted_ms
    for provider, acceptance, most in options:
        for k in range(1, min(most, MAX_DRAFT) + 1):
            tokens = expected_tokens(acceptance, k)
            ms = costs.draft(provider, k) + costs.verify(k + 1)
            if tokens / ms > best_rate:
                best, best_rate = Plan(provider, k, tokens, ms), tokens / ms
    return best


@dataclass(frozen=True)
class Candidate:
    """A provider a round may draft with."""

    provider: str  # "ngram" or "draft"
    bucket: int  # its acceptance bucket: match_bucket(match length) for n-gram lookup, 0 for the draft model
    most: int  # tokens it can propose


class Tuner:
    """What the engine learns about speculating, and the plan it makes from that each
    round: the cost model, the acceptance estimates, and how long since each provider
    was last tried (for probes). `options` are drafting's (margin and probes)."""

    def __init__(self, costs: CostModel, options: DraftingOptions):
        self.costs = costs
        self.options = options
        self.acceptance = AcceptanceTable()
        self.since_used: dict[str, int] = {}  # provider -> tokens generated since its last round
        self.probe_wait: dict[str, int] = {}  # provider -> tokens to wait before probing it

    def plan(self, candidates: list[Candidate], document: str, language: str, fixed_k: int | None = None) -> Plan:
        """The round's provider and k: the best plan by expected tokens per ms, else a
        one-token probe of a provider left unused for long, else a plain step. `fixed_k`
        takes the first candidate at that k (for tests and measurements)."""
        options = [(c.provider, self.acceptance.rate(c.provider, document, language, c.bucket), c.most)
                   for c in candidates]
        if fixed_k is not None:
            plan = self._fixed(options, fixed_k)
        else:
            plan = best_plan(self.costs, options, self.options.margin)
            if plan.provider is None:
                plan = self._probe(options) or plan
        if plan.provider is not None:
            self.since_used[plan.provider] = 0
        return plan

    def observe(self, provider: str | None, bucket: int, drafted: int, accepted: int, produced: int,
                verify_ms: float, draft_ms: float, document: str, language: str) -> None:
        """What a round did: its verify pass's cost, and for a speculative round its
        provider's drafting cost and acceptance."""
        self.costs.record_verify(drafted + 1, verify_ms)
        for name in PRIORS:  # every provider
            self.since_used[name] = self.since_used.get(name, 0) + produced
        if provider is None or drafted == 0:
            return
        every = self.options.probe_every
        wait = self.probe_wait.get(provider, every)
        self.probe_wait[provider] = every if accepted else min(2 * wait, self.options.probe_max)
        self.costs.record_draft(provider, drafted, draft_ms)
        self.acceptance.record(provider, document, language, bucket, accepted, drafted)

    def observe_shadow(self, bucket: int, hit: bool, document: str, language: str) -> None:
        """An n-gram proposal passed over, scored against the token the target produced
        anyway: that token is a sample of p, so it equals the proposed one with
        probability p(token), the chance a point-mass draft is accepted. Free evidence."""
        self.acceptance.record("ngram", document, language, bucket, int(hit), 1)

    def _fixed(self, options: list[tuple[str, float, int]], k: int) -> Plan:
        if not options or k <= 0:
            return Plan(None, 0, 1.0, self.costs.verify(1))
        name, acceptance, most = options[0]
        k = min(k, most)
        return Plan(name, k, expected_tokens(acceptance, k), self.costs.draft(name, k) + self.costs.verify(k + 1))

    def _probe(self, options: list[tuple[str, float, int]]) -> Plan | None:
        for name, acceptance, _ in options:
            if self.since_used.get(name, 0) >= self.probe_wait.get(name, self.options.probe_every):
                return Plan(name, 1, expected_tokens(acceptance, 1), self.costs.draft(name, 1) + self.costs.verify(2))
        return None


def calibrate(context, budget_s: float = 1.0, max_batch: int = MAX_DRAFT + 1) -> CostModel:
    """Time target passes of every batch size 1..max_batch after a short prompt, within
    about `budget_s` seconds. The engine keeps refining these from real rounds."""
    costs = CostModel()
    prompt = list(range(1000, 1128))  # any 128 token ids: only the time matters
    context.truncate(0)
    context.eval(prompt, 0)
    deadline = time.perf_counter() + budget_s
    while time.perf_counter() < deadline:
        for n in range(1, max_batch + 1):
            started = time.perf_counter()
            context.eval(prompt[:n], len(prompt), logits_at=list(range(n)))
            elapsed = (time.perf_counter() - started) * 1000
            context.truncate(len(prompt))
            costs.verify_ms[n] = min(costs.verify_ms.get(n, math.inf), elapsed)
    context.truncate(0)
    return costs

"""Choosing k, and whether to speculate at all, from measurement.

Speculation pays when the tokens a round is expected to yield, E(a, k), cost less
per token than plain steps:

    E(a, k) / (draft_ms(k) + verify_ms(k + 1))  >  1 / verify_ms(1)

verify_ms(n) is measured per batch size: on a CPU it grows with n and is not even
monotone (llama.cpp's batched kernels change at size thresholds: docs/bench.md shows
measured curves and their machines), so a k whose batch is cheap for its size can win.

E is not (1 - a^(k+1)) / (1 - a) with one rate a: a drafted token is accepted with a
chance that depends on its place i in the draft, given that the ones before it were
(an n-gram copy that held for 20 tokens tends to go on holding). The tuner learns that
conditional chance c(i) per provider, per document and language, and for n-gram lookup
per match length, and E(k) = 1 + sum over i <= k of c(1)...c(i). k goes as far as that
curve and the cost curve make it pay, up to the room left.
"""

import bisect
import itertools
import math
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from completer.config import DraftingOptions
from completer.engine.documents import Documents
from completer.engine.kv import common_prefix_length
from completer.engine.speculative import Branch

# Verify batches are calibrated up to 64 tokens (past that the cost curve is extrapolated),
# and a completion asks for 64 tokens by default: a round never needs more.
MAX_DRAFT = 63
# The batch sizes calibrate() times: every one up to 16, where the CPU curve has its dips,
# then a few larger ones for long copies, interpolated between.
CALIBRATED_BATCHES = (*range(1, 17), 20, 24, 32, 48, 64)
# Exponential forgetting: roughly the last 1/(1-DECAY) trials of each estimate count.
DECAY = 0.97
# Until this many trials are recorded for a document, its language's estimate is used.
MIN_TRIALS = 8.0


@dataclass
class CostModel:
    """Milliseconds of one target pass per batch size, and of drafting, from real runs."""

    verify_ms: dict[int, float] = field(default_factory=dict)  # batch size -> ms
    draft_token_ms: dict[str, float] = field(default_factory=dict)  # provider -> ms per drafted token
    smoothing: float = 0.2
    # Where the target's state cannot be cut anywhere (recurrent layers): the widest verify
    # batch llama.cpp can take back itself (its rollback snapshots), and what a wider one
    # costs instead: a checkpoint before it, and on a rejection going back to it
    # (KVSequence.expect_cut, then truncate). Attention cuts anywhere: nothing.
    takes_back: float = math.inf
    checkpoint_ms: float = 0.0
    return_ms: float = 0.0
    _sizes: list[int] = field(default_factory=list, repr=False, compare=False)  # verify_ms's keys, sorted

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
        if len(self._sizes) != len(self.verify_ms):  # a size measured for the first time
            self._sizes = sorted(self.verify_ms)
        sizes = self._sizes
        if not sizes:
            return float(n)  # no data: assume cost grows with n, which keeps k small
        if len(sizes) == 1:
            return self.verify_ms[sizes[0]] * n / sizes[0]
        above = min(max(bisect.bisect(sizes, n), 1), len(sizes) - 1)  # n in [a, b], or beyond the ends
        a, b = sizes[above - 1], sizes[above]
        slope = (self.verify_ms[b] - self.verify_ms[a]) / (b - a)
        return max(self.verify_ms[a] + slope * (n - a), 1e-3)

    def draft(self, provider: str, k: int) -> float:
        return self.draft_token_ms.get(provider, 0.0) * k

    def rejected(self, accepted: int) -> float:
        """What a rejection after `accepted` drafted tokens costs on top of the verify
        batch, where that batch cannot be taken back by llama.cpp: going back to the
        checkpoint and evaluating the last token and the accepted ones again."""
        return self.return_ms + self.verify(accepted + 1)


@dataclass
class AcceptanceCurve:
    """Running estimates of c(i): the chance that drafted token i (1-based) is accepted
    given that the ones before it were. A round that accepted m of k drafted tokens is a
    success at positions 1..m and, when m < k, a failure at m + 1; positions after that
    were not tried. Each position's counts decay with its own trials: it is estimated
    from roughly its last 1/(1-DECAY) trials, however long the rounds."""

    accepted: list[float] = field(default_factory=lambda: [0.0] * MAX_DRAFT)  # [position - 1]
    trials: list[float] = field(default_factory=lambda: [0.0] * MAX_DRAFT)

    def record(self, accepted: int, drafted: int, first: int = 0) -> None:
        """A draft whose positions first+1.. were tried (`first`: those before it held, in
        a continuation) and whose first `accepted` of `drafted` held."""
        for index in range(first, min(first + accepted + 1, first + drafted, MAX_DRAFT)):
            self.trials[index] = self.trials[index] * DECAY + 1
            self.accepted[index] = self.accepted[index] * DECAY + (index < first + accepted)

    def total_trials(self) -> float:
        return self.trials[0]

    def rates(self, most: int, prior: float) -> list[float]:
        """[c(1), ..., c(most)]. Each c(i) is pulled toward c(i - 1) (c(1) toward the
        provider's prior) by two pseudo-trials: a position rarely reached is trusted as
        far as the one before it, which is what a copy that got that far did, and
        evidence moves it from there."""
        rates, before = [], prior
        for index in range(min(most, MAX_DRAFT)):
            before = (self.accepted[index] + 2 * before) / (self.trials[index] + 2)
            rates.append(before)
        return rates

    def survival(self, most: int, prior: float) -> list[float]:
        """[c(1), c(1)c(2), ..., c(1)...c(most)]: the chance each drafted token is kept."""
        return list(itertools.accumulate(self.rates(most, prior), operator.mul))


# Acceptance before anything is measured: optimistic enough to try speculating.
# A rewrite's copy of its original: near what an n-gram probe on copy-heavy generation had
# accepted (measured: docs/speculative-decoding.md, "Measurements behind the engine's constants").
PRIORS = {"draft": 0.6, "ngram": 0.5, "index": 0.4, "copy": 0.8}
# The chance a branch's first token is right, before any is measured: how often, where an
# index draft was rejected at a step whose occurrences had gone on otherwise, the target's
# token was one of theirs (measured: docs/speculative-decoding.md, "Measurements behind
# the engine's constants").
BRANCH_HIT_PRIOR = 0.35


def match_bucket(match_length: int) -> int:
    """n-gram matches grouped by length: 3, 4-5, 6-8, 9-15, 16-31, 32+ tokens."""
    return next((i for i, below in enumerate(MATCH_BUCKET_ENDS) if match_length < below), len(MATCH_BUCKET_ENDS))


MATCH_BUCKET_ENDS = (4, 6, 9, 16, 32)
MATCH_BUCKET_NAMES = ("3", "4-5", "6-8", "9-15", "16-31", "32+")


class AcceptanceTable:
    """Acceptance curves per (provider, bucket), for each language, and for each document
    in what the engine keeps of it (EngineDocument.curves): closing it takes them along.
    A document's next edits have curves apart from its completions', in both: a rewrite
    copies the region its prompt holds much further than a completion goes on as the text
    above it did, so the depth a next edit teaches would have the document's completions
    draft deeper than their own acceptance pays for (benchmarks/local_overlap.py measures
    a completion alone and overlapping a next edit). Which kind is decoding is the
    engine's live caches' (Documents.live, Engine.activate)."""

    def __init__(self, documents: Documents | None = None):
        self.languages: dict[tuple[str, str, int, bool], AcceptanceCurve] = {}  # (provider, language, bucket, edits)
        self.documents = documents if documents is not None else Documents()

    def _edits(self, document: str) -> bool:
        return self.documents.live == (document, True)

    def _of_document(self, provider: str, document: str, bucket: int, edits: bool) -> AcceptanceCurve:
        return self.documents.get(document).curves.setdefault((provider, bucket, edits), AcceptanceCurve())

    def _of_language(self, provider: str, language: str, bucket: int, edits: bool) -> AcceptanceCurve:
        return self.languages.setdefault((provider, language, bucket, edits), AcceptanceCurve())

    def record(self, provider: str, document: str, language: str, bucket: int, accepted: int, drafted: int,
               first: int = 0) -> None:
        edits = self._edits(document)
        self._of_document(provider, document, bucket, edits).record(accepted, drafted, first)
        self._of_language(provider, language, bucket, edits).record(accepted, drafted, first)

    def curve(self, provider: str, document: str, language: str, bucket: int) -> AcceptanceCurve:
        """The document's curve once it has MIN_TRIALS, else its language's."""
        edits = self._edits(document)
        document_curve = self._of_document(provider, document, bucket, edits)
        if document_curve.total_trials() >= MIN_TRIALS:
            return document_curve
        return self._of_language(provider, language, bucket, edits)

    def survival(self, provider: str, document: str, language: str, bucket: int, most: int) -> list[float]:
        return self.curve(provider, document, language, bucket).survival(most, PRIORS.get(provider, 0.5))

    def tuned_documents(self) -> list[str]:
        """The documents with curves of their own."""
        return [name for name, document in self.documents.all() if document.curves]


@dataclass(frozen=True)
class Plan:
    provider: str | None  # None: a plain target step
    k: int
    predicted_tokens: float  # E for the plan (1 for a plain step)
    predicted_ms: float
    # The token tree's branches to verify beside the k drafted tokens, each cut to the
    # tokens of it that pay.
    branches: tuple[Branch, ...] = ()


def with_branches(costs: CostModel, plan: Plan, rates: list[float], offered: Sequence[Branch], hit: float,
                  room: int, rows: int) -> Plan:
    """`plan` with the branches that raise its expected tokens per ms, each cut to its
    first tokens that do. offered: the branches the proposal came with (where its
    occurrences went on otherwise); rates: c(1).. of the plan's provider; hit: the chance
    that where the draft parts from the target at an offered branch's step, the branch's
    first token is the target's; room: the most tokens a round may draft (a branch from
    step s is worth at most room - s); rows: the most the branches may add (the context's).

    A branch from step s pays only when the draft is rejected at s + 1 and the branch is
    right there; then each further token of it is kept with the chance at its draft
    position. Every row costs what the cost curve says a wider batch costs."""
    width, tokens, ms = plan.k + 1, plan.predicted_tokens, plan.predicted_ms
    chosen = []
    for step, proposed in sorted(offered, key=lambda branch: branch.step):
        if step >= plan.k or rows <= 0:
            break
        kept = math.prod(rates[:step]) * (1.0 - rates[step]) * hit  # the branch's first token is the target's
        gain, best_length, best_gain, best_ms = 0.0, 0, 0.0, ms
        for length in range(1, min(len(proposed), room - step, rows) + 1):
            if length > 1:
                kept *= rates[min(step + length - 1, len(rates) - 1)]
            gain += kept
            branched_ms = ms - costs.verify(width) + costs.verify(width + length)
            if (tokens + gain) / branched_ms > (tokens + best_gain) / best_ms:
                best_length, best_gain, best_ms = length, gain, branched_ms
        if best_length:
            chosen.append(Branch(step, proposed[:best_length]))
            width, tokens, ms, rows = width + best_length, tokens + best_gain, best_ms, rows - best_length
    return Plan(plan.provider, plan.k, tokens, ms, tuple(chosen)) if chosen else plan


def best_plan(costs: CostModel, options: list[tuple[str, list[float]]],
              margin: float = DraftingOptions().margin) -> Plan:
    """The plan with the most expected tokens per ms, if it beats plain decoding by
    `margin` (drafting.margin). options: (provider, the chance each drafted token it can
    propose is kept: AcceptanceCurve.survival)."""
    plain = Plan(None, 0, 1.0, costs.verify(1))
    best, best_rate = plain, (1.0 + margin) / plain.predicted_ms
    for provider, kept in options:
        tokens = 1.0
        # The expected cost of taking a draft of k back (CostModel.rejected), were llama.cpp
        # unable to: a rejection at each step j + 1 <= k, with the chance the first j held.
        taking_back, before = costs.checkpoint_ms, 1.0
        for k, chance in enumerate(kept[:MAX_DRAFT], start=1):
            tokens += chance
            taking_back += (before - chance) * costs.rejected(k - 1)
            before = chance
            ms = costs.draft(provider, k) + costs.verify(k + 1) + (taking_back if k + 1 > costs.takes_back else 0.0)
            if tokens / ms > best_rate:
                best, best_rate = Plan(provider, k, tokens, ms), tokens / ms
    return best


@dataclass(frozen=True)
class Continuation:
    """A lookup's proposal past the k tokens a round drafted, when the target kept all k:
    whether each further token is the one the target goes on to make says whether a
    longer draft would have held there. A drafted token is a point mass, kept with the
    chance p(token), the chance the target makes it: free evidence, as a shadow is for
    one token. Without it a position past the k a provider is drafted at is tried only
    when a plan reaches it, which its old failures there keep it from: copies that once
    failed at their 3rd token and then held on were drafted 3 tokens a round for 22
    rounds in a simulation (tests/unit/test_tuning.py checks 10), where with it k passed 16
    within 10."""

    provider: str
    bucket: int
    position: int  # the draft position of tail[0], 0-based
    tail: tuple[int, ...]


# Continuations checked at once: a round makes at most one, and one lasts as long as its
# proposal (up to MAX_DRAFT tokens), so a few rounds' worth bounds the work.
MAX_CONTINUATIONS = 8


@dataclass(frozen=True)
class Candidate:
    """A provider a round may draft with."""

    provider: str  # "ngram" (open documents), "index" (the workspace index), "copy" (a rewrite's original) or "draft"
    bucket: int  # its acceptance bucket: match_bucket(match length) for n-gram lookup, 0 for the draft model
    most: int  # tokens it can propose


class Trial(NamedTuple):
    """What one round tried and got, for the tuner (Tuner.observe)."""

    provider: str | None  # None: a plain step
    bucket: int  # the draft's acceptance bucket (Candidate.bucket)
    drafted: int
    accepted: int  # drafted tokens the target kept
    produced: int  # tokens the round added
    verify_ms: float  # the target's pass
    draft_ms: float  # proposing the draft
    branch_rows: int = 0  # rows verified beside the draft for a token tree's branches


class Tuner:
    """What the engine learns about speculating, and the plan it makes from that each
    round: the cost model, the acceptance estimates, and how long since each provider
    was last tried (for probes). `options` are drafting's (margin and probes)."""

    def __init__(self, costs: CostModel, options: DraftingOptions, documents: Documents | None = None):
        """`documents`: the engine's, which hold each document's acceptance curves."""
        self.costs = costs
        self.options = options
        self.acceptance = AcceptanceTable(documents)
        self.since_used: dict[str, int] = {}  # provider -> tokens generated since its last round
        self.probe_wait: dict[str, int] = {}  # provider -> tokens to wait before probing it
        self.branch_hits = AcceptanceCurve()  # its first position: how often a branch's first token is the target's
        self.continuations: list[Continuation] = []  # of the generation under way (generate clears them)

    def plan(self, candidates: list[Candidate], document: str, language: str, fixed_k: int | None = None) -> Plan:
        """The round's provider and k: the best plan by expected tokens per ms, else a
        one-token probe of a provider left unused for long, else a plain step. `fixed_k`
        takes the first candidate at that k (for tests and measurements)."""
        options = [(c.provider, self.acceptance.survival(c.provider, document, language, c.bucket, c.most))
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

    def branched(self, plan: Plan, offered: Sequence[Branch], document: str, language: str, bucket: int,
                 room: int, rows: int) -> Plan:
        """`plan` with the token-tree branches that pay (with_branches), from those its
        proposal offers."""
        if not offered or plan.provider is None:
            return plan
        most = plan.k + max(len(branch.tokens) for branch in offered)
        rates = self.acceptance.curve(plan.provider, document, language, bucket).rates(
            most, PRIORS.get(plan.provider, 0.5))
        hit = self.branch_hits.rates(1, BRANCH_HIT_PRIOR)[0]
        return with_branches(self.costs, plan, rates, offered, hit, room, rows)

    def observe_branch(self, hit: bool) -> None:
        """A draft rejected at an offered branch's step: whether that branch started with
        the target's token."""
        self.branch_hits.record(int(hit), 1)

    def observe(self, trial: Trial, document: str, language: str) -> None:
        """What a round did: its verify pass's cost, and for a speculative round its
        provider's drafting cost and acceptance."""
        self.costs.record_verify(trial.drafted + 1 + trial.branch_rows, trial.verify_ms)
        for name in PRIORS:  # every provider
            self.since_used[name] = self.since_used.get(name, 0) + trial.produced
        provider = trial.provider
        if provider is None or trial.drafted == 0:
            return
        every = self.options.probe_every
        wait = self.probe_wait.get(provider, every)
        self.probe_wait[provider] = every if trial.accepted else min(2 * wait, self.options.probe_max)
        self.costs.record_draft(provider, trial.drafted, trial.draft_ms)
        self.acceptance.record(provider, document, language, trial.bucket, trial.accepted, trial.drafted)

    def follow(self, made: Sequence[int], started: Continuation | None, document: str, language: str) -> None:
        """The tokens a round made, against each continuation being checked (`started`:
        the round's own, from its first token after the draft): each token checked is a
        trial at its position; a continuation ends where it parts or runs out."""
        made = tuple(made)  # as the tails are: a list never equals a tuple
        going, pairs = [], [(continuation, made) for continuation in self.continuations]
        if started is not None:
            pairs.append((started, made[started.position:]))
        for continuation, tokens in pairs:
            checked = min(len(continuation.tail), len(tokens))
            held = common_prefix_length(continuation.tail, tokens)
            self.acceptance.record(continuation.provider, document, language, continuation.bucket, held,
                                   min(held + 1, checked), continuation.position)
            if held == checked < len(continuation.tail):
                going.append(Continuation(continuation.provider, continuation.bucket, continuation.position + held,
                                          continuation.tail[held:]))
        self.continuations = going[-MAX_CONTINUATIONS:]

    def observe_shadow(self, bucket: int, hit: bool, document: str, language: str) -> None:
        """An n-gram proposal passed over, scored against the token the target produced
        anyway: that token is a sample of p, so it equals the proposed one with
        probability p(token), the chance a point-mass draft is accepted. Free evidence."""
        self.acceptance.record("ngram", document, language, bucket, int(hit), 1)

    def _fixed(self, options: list[tuple[str, list[float]]], k: int) -> Plan:
        if not options or k <= 0:
            return Plan(None, 0, 1.0, self.costs.verify(1))
        name, kept = options[0]
        k = min(k, len(kept))
        return Plan(name, k, 1.0 + sum(kept[:k]), self.costs.draft(name, k) + self.costs.verify(k + 1))

    def _probe(self, options: list[tuple[str, list[float]]]) -> Plan | None:
        for name, kept in options:
            if kept and self.since_used.get(name, 0) >= self.probe_wait.get(name, self.options.probe_every):
                return Plan(name, 1, 1.0 + kept[0], self.costs.draft(name, 1) + self.costs.verify(2))
        return None


def calibrate(context, budget_s: float = 1.0, batches: tuple[int, ...] = CALIBRATED_BATCHES) -> CostModel:
    """Time target passes of each batch size in `batches` after a short prompt, within
    about `budget_s` seconds (each size at least once). The engine keeps refining these
    from real rounds."""
    costs = CostModel(takes_back=widest_taken_back(context))
    prompt = list(range(1000, 1128))  # any 128 token ids: only the time matters
    batch = list(range(2000, 2000 + max(batches)))
    context.truncate(0)
    context.eval(prompt, 0)
    checkpoint = None
    if not context.cuts_anywhere:
        started = time.perf_counter()
        checkpoint = context.checkpoint()
        costs.checkpoint_ms = (time.perf_counter() - started) * 1000
    deadline = time.perf_counter() + budget_s
    while not costs.verify_ms or time.perf_counter() < deadline:
        for n in batches:
            started = time.perf_counter()
            context.eval(batch[:n], len(prompt), logits_at=list(range(n)))
            elapsed = (time.perf_counter() - started) * 1000
            costs.verify_ms[n] = min(costs.verify_ms.get(n, math.inf), elapsed)
            if not context.cut(len(prompt)):
                started = time.perf_counter()
                context.return_to(checkpoint, len(prompt))
                costs.return_ms = min(costs.return_ms or math.inf, (time.perf_counter() - started) * 1000)
    context.truncate(0)
    return costs


def widest_taken_back(context) -> float:
    """The widest verify batch that llama.cpp can cut back itself on this context (every
    batch where attention alone holds the text)."""
    if context.cuts_anywhere:
        return math.inf
    return max((width for width in range(1, MAX_DRAFT + 2) if context.can_take_back(width)), default=0)

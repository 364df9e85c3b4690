"""Generation: rounds of draft -> verify -> accept until a stop, with the tuner choosing
each round's provider and k. Plain decoding is the same loop with k = 0."""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from completer.config import DRAFT_MODES
from completer.healing import Healing, mask_to
from completer.drafts import NO_PROPOSAL, ModelDrafter, NgramDrafter, Proposal
from completer.kv import KVSequence
from completer.speculative import Sampling, expected_tokens, probabilities, verify_greedy, verify_sampled
from completer.tuning import MAX_DRAFT, AcceptanceTable, CostModel, Plan, best_plan, calibrate, match_bucket
from models.backend import LlamaContext, LlamaModel

log = logging.getLogger("completer.engine")

# hybrid: an n-gram match this long is trusted over the draft model.
HYBRID_MIN_MATCH = 5
# A provider the tuner has not used for this many tokens gets one small round, so that
# an estimate gone pessimistic can recover when the text changes. Each probe that is
# rejected doubles the wait, up to PROBE_MAX: a draft that never pays costs ever less.
PROBE_EVERY = 32
PROBE_MAX = 1024


@dataclass
class GenerationStats:
    mode: str
    tokens: int = 0
    target_passes: int = 0
    speculative_rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    tokens_in_speculative_rounds: int = 0
    predicted_tokens: float = 0.0  # sum of E over speculative rounds
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    total_ms: float = 0.0
    # (provider or None for a plain step, tokens drafted) per target pass, for cost accounting
    rounds: list[tuple[str | None, int]] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.target_passes if self.target_passes else 0.0

    @property
    def predicted_e(self) -> float:
        """Mean E the tuner predicted for its speculative rounds."""
        return self.predicted_tokens / self.speculative_rounds if self.speculative_rounds else 0.0

    @property
    def measured_e(self) -> float:
        """Mean tokens a speculative round actually produced."""
        return self.tokens_in_speculative_rounds / self.speculative_rounds if self.speculative_rounds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.total_ms * 1000 if self.total_ms else 0.0


@dataclass
class Generation:
    text: str
    tokens: list[int]
    stop_reason: str  # "end", "stop", "done", "max_tokens", "time", "cancelled", "context"
    stats: GenerationStats
    # With keep_logits: the target's logits that chose each token, plus the row that chose
    # the end-of-generation token where one stopped it. [len(tokens) (+1), V]
    logits: np.ndarray | None = None


class Engine:
    """The models' caches, the draft providers and what the tuner has learnt."""

    def __init__(self, target: LlamaModel, draft: LlamaModel | None = None, n_ctx: int = 4096,
                 threads: int = 0, calibrate_s: float = 1.0, exact: bool = False):
        self.model = target
        # exact: the target decodes one token per llama_decode, so that a verify batch
        # scores as plain steps do and greedy speculation equals plain decoding bit for bit.
        # The draft's numerics only move acceptance, never the output: it stays batched.
        self.target = KVSequence(LlamaContext(target, n_ctx=n_ctx, n_threads=threads or None,
                                              single_token_eval=exact))
        self.costs = calibrate(self.target.context, calibrate_s) if calibrate_s > 0 else CostModel()
        self.drafter = None
        if draft is not None:
            self.drafter = ModelDrafter(
                KVSequence(LlamaContext(draft, n_ctx=n_ctx, n_threads=threads or None)), target.n_vocab
            )
            if calibrate_s > 0:
                self.costs.record_draft("draft", 1, _time_one_step(self.drafter.sequence.context))
        self.draft_failure = ""  # why the draft model was dropped mid-session; "" while it serves
        self.ngram = NgramDrafter()
        self.acceptance = AcceptanceTable()
        self.since_used: dict[str, int] = {}  # provider -> tokens generated since its last round
        self.probe_wait: dict[str, int] = {}  # provider -> tokens to wait before probing it


def _drop_draft(engine: Engine, error: Exception) -> None:
    """The draft model failed (a llama.cpp error in its context): go on with n-gram
    lookup and plain target steps, which need nothing from it, and say so in the stats."""
    log.warning("the draft model failed, decoding without it: %s", error)
    engine.draft_failure = f"the draft model failed ({error}); completing with the target alone"
    engine.drafter = None


def _time_one_step(context: LlamaContext) -> float:
    context.eval(list(range(1000, 1064)), 0)
    times = []
    for position in range(64, 72):
        started = time.perf_counter()
        context.eval([1000], position, logits_at=[0])
        times.append((time.perf_counter() - started) * 1000)
    context.truncate(0)
    return float(np.median(times))


@dataclass
class _Round:
    """What the tuner decided for one round, and the proposal it got."""

    plan: Plan
    provider: str | None
    proposal: Proposal
    # An n-gram proposal the tuner passed over: scored against the token the target
    # produces anyway, it teaches the acceptance estimate for free.
    shadow: Proposal | None = None


def _choose(engine: Engine, mode: str, tokens: list[int], document: str, language: str, room: int,
            fixed_k: int | None, sampling: Sampling, rng: np.random.Generator) -> _Round:
    """Pick this round's provider and k, and get its proposal."""
    allowed = DRAFT_MODES[mode]
    most = min(MAX_DRAFT, room)
    if not allowed or most <= 0:
        return _Round(Plan(None, 0, 1.0, 0.0), None, NO_PROPOSAL)
    lookup_started = time.perf_counter()
    lookup, match = engine.ngram.lookup(tokens, most) if {"ngram", "hybrid"} & set(allowed) else ([], 0)
    lookup_ms = (time.perf_counter() - lookup_started) * 1000
    use_ngram = "ngram" in allowed or ("hybrid" in allowed and match >= HYBRID_MIN_MATCH)
    use_model = engine.drafter is not None and ("draft" in allowed or ("hybrid" in allowed and not use_ngram))
    options: list[tuple[str, float, int]] = []  # (provider, estimated a, most k), preferred first
    if use_ngram and lookup:
        options.append(("ngram", engine.acceptance.rate("ngram", document, language, match_bucket(match)),
                        len(lookup)))
    if use_model:
        options.append(("draft", engine.acceptance.rate("draft", document, language, 0), most))

    if fixed_k is not None:
        plan = _fixed_plan(engine.costs, options, fixed_k)
    else:
        plan = best_plan(engine.costs, options)
        if plan.provider is None:
            plan = _probe(engine, options) or plan
    if plan.provider is None:
        shadow = Proposal(lookup[:1], None, lookup_ms, match) if lookup and use_ngram else None
        return _Round(plan, None, NO_PROPOSAL, shadow)
    engine.since_used[plan.provider] = 0
    if plan.provider == "ngram":
        proposal = Proposal(lookup[: plan.k], None, lookup_ms, match)
    else:
        try:
            proposal = engine.drafter.propose(tokens, plan.k, sampling, rng)
        except (RuntimeError, ValueError) as error:  # llama_decode failed, or the draft's context is full
            _drop_draft(engine, error)
            return _Round(Plan(None, 0, 1.0, 0.0), None, NO_PROPOSAL)
    return _Round(plan, plan.provider, proposal)


def _fixed_plan(costs: CostModel, options: list[tuple[str, float, int]], k: int) -> Plan:
    """The preferred provider at a fixed k: for measuring, not tuned."""
    if not options or k <= 0:
        return Plan(None, 0, 1.0, costs.verify(1))
    name, acceptance, most = options[0]
    k = min(k, most)
    return Plan(name, k, expected_tokens(acceptance, k), costs.draft(name, k) + costs.verify(k + 1))


def _probe(engine: Engine, options: list[tuple[str, float, int]]) -> Plan | None:
    """One token from a provider left unused for a while: its estimate may be stale."""
    for name, acceptance, _ in options:
        if engine.since_used.get(name, 0) >= engine.probe_wait.get(name, PROBE_EVERY):
            costs = engine.costs
            return Plan(name, 1, expected_tokens(acceptance, 1), costs.draft(name, 1) + costs.verify(2))
    return None


def generate(
    engine: Engine,
    prompt: list[int],
    max_tokens: int,
    stop: tuple[str, ...] = (),
    time_budget_ms: float | None = None,
    sampling: Sampling = Sampling(),
    mode: str = "auto",
    cancel: threading.Event | None = None,
    document: str = "",
    language: str = "",
    draft_length: int | None = None,
    done: Callable[[str], bool] | None = None,
    healing: Healing | None = None,
    keep_logits: bool = False,
) -> Generation:
    """Continue `prompt` by up to `max_tokens` tokens.

    Stops at an end-of-generation token, at a `stop` string (excluded from the text),
    after `time_budget_ms` of predicting (prompt evaluation not counted), or when `cancel` is set (checked between rounds). The
    target's KV cache is reused for the longest common prefix with the last call.
    Acceptance is learnt per `document` and `language`. `draft_length` fixes k and
    bypasses the tuner (for tests and measurements). `done(text)` ends generation early
    when the text is complete (e.g. it left the scope being written). With `healing`,
    the first token is one of `healing.allowed` and the text starts after `healing.text`.
    `keep_logits` returns the target's logits behind each token (to judge near ties).
    """
    if mode not in DRAFT_MODES:
        raise ValueError(f"unknown draft mode {mode!r}; modes: {', '.join(DRAFT_MODES)}")
    started = time.perf_counter()
    rng = np.random.default_rng(sampling.seed)
    stats = GenerationStats(mode)
    target = engine.target
    n_ctx = target.context.n_ctx_seq
    tokens = list(prompt[-(n_ctx - 1):])  # a prompt longer than the context keeps its end
    prompt_length = len(tokens)
    target.sync(tokens[:-1])
    predict_started = time.perf_counter()  # the time budget is for predicting, as llama.vim's t_max_predict_ms
    stop_reason = "max_tokens"
    text = ""
    rows: list[np.ndarray] = []  # with keep_logits: [produced, V] per round

    while len(tokens) - prompt_length < max_tokens:
        if cancel is not None and cancel.is_set():
            stop_reason = "cancelled"
            break
        if time_budget_ms is not None and (time.perf_counter() - predict_started) * 1000 >= time_budget_ms:
            stop_reason = "time"
            break
        room = min(max_tokens - (len(tokens) - prompt_length), n_ctx - len(tokens)) - 1
        if room < 0:
            stop_reason = "context"
            break
        heal_now = healing is not None and len(tokens) == prompt_length
        if heal_now:  # a plain step: drafts know nothing of the constraint
            chosen = _Round(Plan(None, 0, 1.0, 0.0), None, NO_PROPOSAL)
        else:
            chosen = _choose(engine, mode, tokens, document, language, room, draft_length, sampling, rng)
        draft = chosen.proposal.tokens

        verify_started = time.perf_counter()
        logits = target.extend([tokens[-1], *draft], logits_at=list(range(len(draft) + 1)))  # [k+1, V]
        if heal_now:
            logits = mask_to(logits[0], healing.allowed)[None, :]
        if sampling.greedy:
            accepted, next_token = verify_greedy(logits, draft)
        else:
            accepted, next_token = verify_sampled(probabilities(logits, sampling), chosen.proposal.q, draft, rng)
        target.truncate(len(tokens) + accepted)
        if keep_logits:
            rows.append(logits[: accepted + 1])  # row i chose the round's i-th new token
        verify_ms = (time.perf_counter() - verify_started) * 1000
        if chosen.provider == "draft":
            # The draft evaluated last, d1..d(k-1): keep what the target accepted.
            try:
                engine.drafter.sequence.truncate(len(tokens) + accepted)
            except RuntimeError as error:
                _drop_draft(engine, error)

        new = [*draft[:accepted], next_token]
        tokens.extend(new)
        _record(engine, stats, chosen, accepted, len(new), next_token, verify_ms, document, language)

        produced = tokens[prompt_length:]
        end = next((i for i, t in enumerate(produced) if engine.model.is_end_of_generation(t)), None)
        if end is not None:
            del tokens[prompt_length + end:]
            stop_reason = "end"
            break
        text = _text(engine, tokens[prompt_length:], healing)
        cut = min((text.find(s) for s in stop if s and s in text), default=-1)
        if cut >= 0:
            text = text[:cut]
            stop_reason = "stop"
            break
        if done is not None and done(text):
            stop_reason = "done"
            break

    del tokens[prompt_length + max_tokens:]
    generated = tokens[prompt_length:]
    if stop_reason != "stop":
        text = _text(engine, generated, healing)
    stats.tokens = len(generated)
    stats.total_ms = (time.perf_counter() - started) * 1000
    kept = None
    if keep_logits:
        kept = np.concatenate([np.empty((0, engine.model.n_vocab), np.float32), *rows])
        kept = kept[: len(generated) + (stop_reason == "end")]
    return Generation(text, generated, stop_reason, stats, kept)


def _text(engine: Engine, generated: list[int], healing: Healing | None) -> str:
    """The generated text, less the bytes healing backed up over (the user typed them)."""
    text = engine.model.detokenize(generated)
    return text[len(healing.text):] if healing is not None else text


def _record(engine: Engine, stats: GenerationStats, chosen: _Round, accepted: int, produced: int,
            next_token: int, verify_ms: float, document: str, language: str) -> None:
    drafted = len(chosen.proposal.tokens)
    engine.costs.record_verify(drafted + 1, verify_ms)
    stats.rounds.append((chosen.provider if drafted else None, drafted))
    stats.target_passes += 1
    stats.verify_ms += verify_ms
    for name in DRAFT_MODES["auto"]:
        engine.since_used[name] = engine.since_used.get(name, 0) + produced
    if chosen.shadow is not None:
        # The target's token is a sample of p, so it equals the proposed token with
        # probability p(token): the chance a point-mass draft is accepted.
        hit = int(chosen.shadow.tokens[0] == next_token)
        engine.acceptance.record("ngram", document, language, match_bucket(chosen.shadow.match_length), hit, 1)
    if chosen.provider is None or drafted == 0:
        return
    wait = engine.probe_wait.get(chosen.provider, PROBE_EVERY)
    engine.probe_wait[chosen.provider] = PROBE_EVERY if accepted else min(2 * wait, PROBE_MAX)
    engine.costs.record_draft(chosen.provider, drafted, chosen.proposal.draft_ms)
    bucket = match_bucket(chosen.proposal.match_length) if chosen.provider == "ngram" else 0
    engine.acceptance.record(chosen.provider, document, language, bucket, accepted, drafted)
    stats.speculative_rounds += 1
    stats.drafted += drafted
    stats.accepted += accepted
    stats.tokens_in_speculative_rounds += produced
    stats.predicted_tokens += chosen.plan.predicted_tokens
    stats.draft_ms += chosen.proposal.draft_ms + chosen.proposal.catch_up_ms

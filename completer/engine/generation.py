"""Generation: rounds of draft -> verify -> accept until a stop, with the tuner choosing
each round's provider and k. Plain decoding is the same loop with k = 0."""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from completer.config import DRAFT_MODES, CacheOptions, DraftingOptions
from completer.engine.documents import Documents, Snapshot
from completer.engine.drafts import NO_PROPOSAL, CopyDrafter, ModelDrafter, NgramDrafter, NgramIndex, Proposal
from completer.engine.healing import Healing, mask_to
from completer.engine.kv import CheckpointBudget, KVSequence, common_prefix_length, evaluate_in_pieces
from completer.engine.speculative import (Branch, Sampling, TreeVerdict, accept_greedy, accept_tree, probabilities,
                                          verify_greedy, verify_sampled)
from completer.engine.tuning import (MAX_DRAFT, Candidate, Continuation, CostModel, Plan, Trial, Tuner, calibrate,
                                     match_bucket, widest_taken_back)
from completer.engine.workspace_index import NO_MATCH, WorkspaceIndex
from completer.models.llama import CUT_ANYWHERE, LlamaContext, LlamaModel
from completer.requests import StopReason

log = logging.getLogger(__name__)

# The providers that propose what followed a match: n-gram lookup's two sources, and a
# rewrite's original (copy drafting).
LOOKUPS = ("ngram", "index", "copy")
INDEX_AFTER_MATCH = 9  # the workspace index is looked in after shorter local matches only
# Token-tree branches the target's context has llama.cpp sequences for (drafting.tree_branches
# uses up to this many).
MAX_TREE_BRANCHES = 4
# A prompt is evaluated this many tokens at a time, its request's cancel flag checked
# between pieces, so that a newer request waits for one piece, not the whole prompt:
# pieces this long evaluate as fast as the whole prompt, within noise, and the slowest
# is far shorter than the whole (measured: docs/typing.md, "Prompt pieces").
PROMPT_PIECE = 64
# Of a model with recurrent state whose architecture llama.cpp can roll back, how many of
# a verify batch's last tokens it keeps snapshots for (n_rs_seq): a rejection within them
# is a cut. Each snapshot is one more copy of the recurrent state, so not MAX_DRAFT + 1:
# a longer draft is verified after a checkpoint (KVSequence.expect_cut), a cost the tuner
# counts (CostModel.rejected). With GPU layers only: the snapshots cost every batch, and
# on a CPU a recurrent model decoded faster without them, its n-gram modes too although
# each rejection then went back to a checkpoint: there verification is compute-bound, so
# the tuner drafts little (measured: docs/speculative-decoding.md, "Measurements behind
# the engine's constants").
ROLLBACK_TOKENS = 16


@dataclass
class GenerationStats:
    mode: str
    tokens: int = 0
    target_passes: int = 0
    speculative_rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    tokens_in_speculative_rounds: int = 0
    # Index rounds rejected where the index's occurrences had gone on otherwise, and of
    # those, the ones where the runner-up there had the target's token: what a token
    # tree can save, verified or not. Rounds that verified branches, their extra rows,
    # and the rounds a branch carried on.
    branch_points: int = 0
    branch_hits: int = 0
    tree_rounds: int = 0
    branch_rows: int = 0
    branches_taken: int = 0
    predicted_tokens: float = 0.0  # sum of E over speculative rounds
    # Where the target's state cannot be cut anywhere: prompt tokens before the first
    # change that its cache held but evaluated again from a checkpoint, and tokens it
    # evaluated again after going back to one at a rejected draft.
    rewound: int = 0
    replayed: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    total_ms: float = 0.0
    # Per target pass: (provider or None for a plain step, tokens drafted, the n-gram match
    # length behind them (0 for other providers), the tokens the tuner predicted the pass
    # would make, the tokens it made), for cost accounting and `completer bench --profile`.
    rounds: list[tuple[str | None, int, int, float, int]] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.target_passes if self.target_passes else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.total_ms * 1000 if self.total_ms else 0.0


class RoundStats(NamedTuple):
    """What one round did: one target pass, and the draft it verified."""

    provider: str | None  # None: a plain step, nothing drafted
    drafted: int
    accepted: int  # drafted tokens the target kept
    produced: int  # tokens the round added: the accepted ones, a branch's, the target's own
    match_length: int  # the n-gram match behind the draft; 0 for other providers
    predicted_tokens: float  # what the tuner expected the round to produce (1 for a plain step)
    verify_ms: float
    draft_ms: float  # proposing, and the draft model's catching up on text it had not seen
    branch_rows: int  # rows verified for token-tree branches beside the draft
    branch_taken: bool  # a branch carried the round
    # Where the draft parted from the target at an offered branch's step: whether that
    # branch's first token was the target's. None elsewhere.
    branch_hit: bool | None


def summarize(mode: str, rounds: list[RoundStats], tokens: int, total_ms: float, rewound: int = 0,
              replayed: int = 0) -> GenerationStats:
    """A generation's statistics from its rounds'; `tokens` it returned (a round may run
    past the limit), in `total_ms`."""
    speculative = [r for r in rounds if r.provider is not None]
    return GenerationStats(
        mode, tokens, target_passes=len(rounds), speculative_rounds=len(speculative),
        drafted=sum(r.drafted for r in speculative), accepted=sum(r.accepted for r in speculative),
        tokens_in_speculative_rounds=sum(r.produced for r in speculative),
        branch_points=sum(r.branch_hit is not None for r in speculative),
        branch_hits=sum(bool(r.branch_hit) for r in speculative),
        tree_rounds=sum(r.branch_rows > 0 for r in speculative), branch_rows=sum(r.branch_rows for r in speculative),
        branches_taken=sum(r.branch_taken for r in speculative),
        predicted_tokens=sum(r.predicted_tokens for r in speculative),
        rewound=rewound, replayed=replayed, draft_ms=sum(r.draft_ms for r in speculative),
        verify_ms=sum(r.verify_ms for r in rounds), total_ms=total_ms,
        rounds=[(r.provider, r.drafted, r.match_length, r.predicted_tokens, r.produced) for r in rounds])


@dataclass
class Generation:
    text: str
    tokens: list[int]
    stop_reason: str  # "end", "stop", "done", "max_tokens", "time", "cancelled", "context"
    stats: GenerationStats
    # With keep_logits: the target's logits that chose each token, plus the row that chose
    # the end-of-generation token where one stopped it. [len(tokens) (+1), V]
    logits: np.ndarray | None = None
    end_token: int | None = None  # the end-of-generation token that stopped it ("end")


class Engine:
    """The models' caches, the draft providers and what the tuner has learnt."""

    def __init__(self, target: LlamaModel, draft: LlamaModel | None = None, n_ctx: int = 4096,
                 threads: int = 0, calibrate_s: float = 1.0, exact: bool = False, costs: CostModel | None = None,
                 drafting: DraftingOptions = DraftingOptions()):
        """`costs`: another engine's measured cost model, shared instead of measuring one."""
        self.model = target
        # exact: the target decodes one token per llama_decode, so that a verify batch
        # scores as plain steps do and greedy speculation equals plain decoding bit for bit.
        # The draft's numerics only move acceptance, never the output: it stays batched.
        # Branches only where trees and candidates run: llama.cpp cannot share part of a
        # recurrent state between sequences, and there each sequence more costs a state per
        # rollback snapshot (measured: docs/speculative-decoding.md, "Measurements behind
        # the engine's constants").
        branches = MAX_TREE_BRANCHES if target.memory in CUT_ANYWHERE else 0
        rollback_tokens = ROLLBACK_TOKENS if target.gpu_layers > 0 else 0
        # The caches' checkpoints together, where the model's state cannot be cut anywhere:
        # cache.checkpoint_mb's default until `checkpoints.limit` changes it.
        self.checkpoints = CheckpointBudget(int(CacheOptions().checkpoint_mb * 2**20))
        self.target = KVSequence(LlamaContext(target, n_ctx=n_ctx, n_threads=threads or None,
                                              single_token_eval=exact, branches=branches,
                                              rollback_tokens=rollback_tokens), self.checkpoints)
        measure = costs is None and calibrate_s > 0
        if costs is None:
            costs = calibrate(self.target.context, calibrate_s) if measure else CostModel()
        costs.takes_back = widest_taken_back(self.target.context)
        self.drafter = None
        if draft is not None:
            self.drafter = ModelDrafter(
                KVSequence(LlamaContext(draft, n_ctx=n_ctx, n_threads=threads or None), self.checkpoints),
                target.n_vocab
            )
            if measure:
                costs.record_draft("draft", 1, _time_one_step(self.drafter.sequence.context))
        self.draft_failure = ""  # why the draft model was dropped mid-session; "" while it serves
        self.drafting = drafting
        # What the engine keeps of each open document: one removal forgets it (forget).
        self.documents = Documents(int(CacheOptions().budget_mb * 2**20))
        self.ngram = NgramDrafter(drafting, documents=self.documents)
        self.tuner = Tuner(costs, drafting, self.documents)

    def configure(self, drafting: DraftingOptions, cache: CacheOptions | None = None) -> None:
        """New options: drafting's apply from the next round on; the cache's budgets (the
        saved documents' caches, the checkpoints) now."""
        if drafting != self.drafting:
            self.drafting = self.tuner.options = drafting
            self.ngram.configure(drafting)
        if cache is not None:
            self.documents.budget_bytes = int(cache.budget_mb * 2**20)
            self.checkpoints.limit(int(cache.checkpoint_mb * 2**20))

    def use_index(self, workspace: WorkspaceIndex | None) -> None:
        """n-gram lookup looks in this workspace index from now on (None: in none)."""
        self.ngram.use_index(workspace)

    @property
    def offers_candidates(self) -> bool:
        """Whether candidates() can fork the target's sequence: recurrent state cannot be."""
        return self.target.context.cuts_anywhere

    def enter(self, document: str, left: tuple[str, str] | None = None, edits: bool = False) -> None:
        """The editor is in `document`, having left `left` (its name and text) for it:
        n-gram lookup drafts from the text left, and no longer from this document's older
        copy, and the document's caches are made live (activate)."""
        if left is not None:
            self.ngram.set_other_document(left[0], self.model.tokenize(left[1]))
        self.ngram.remove_other_document(document)  # it is the live document now
        self.activate(document, edits)

    def activate(self, document: str, edits: bool = False) -> None:
        """Make `document`'s caches the live ones, saving the live ones as their
        document's. Its next edits (`edits`) have caches of their own: their prompt (an
        instruction, the region to rewrite) shares next to nothing with its completions'
        (the text before the cursor), so in one cache each request evaluated its whole
        prompt again after the other kind, and the editors ask for a next edit whenever
        typing pauses."""
        documents = self.documents
        if (document, edits) == documents.live:
            return
        snapshot = documents.take_snapshot(document, edits)  # taken first: saving must not evict it
        if documents.live is not None:
            documents.keep_snapshot(*documents.live, Snapshot([sequence.save() for sequence in self.sequences]))
        for index, sequence in enumerate(self.sequences):
            if snapshot is not None:
                sequence.restore(snapshot.sequences[index])
            else:
                sequence.truncate(0)
        documents.live = (document, edits)

    def holds(self, document: str, edits: bool = False) -> bool:
        """Whether the live caches are the document's (its next edits', for `edits`)."""
        return self.documents.live == (document, edits)

    def forget(self, document: str) -> None:
        """The document closed: all the engine kept of it goes in one removal (its saved
        caches with their checkpoints, its text for n-gram lookup, its acceptance curves;
        its language's curves keep what it taught them), and live caches that were its
        are emptied, their checkpoints with them."""
        live = self.documents.live
        self.documents.forget(document)
        if live is not None and live[0] == document:
            for sequence in self.sequences:
                sequence.truncate(0)

    def saved_file_index(self, text: str) -> NgramIndex:
        """The n-gram index of a file's saved text, for set_saved_file: built without the
        engine, so that a request need not wait for it."""
        return self.ngram.saved_file_index(self.model.tokenize(text))

    def set_saved_file(self, path: str, index: NgramIndex) -> None:
        """n-gram lookup drafts from this text of the file from now on."""
        self.ngram.set_saved_file(path, index)

    def has_saved_file(self, path: str) -> bool:
        return self.ngram.has_saved_file(path)

    def document_statistics(self) -> dict:
        """For completer/stats, from any thread."""
        return {"saved_kv_mb": self.documents.saved_bytes / 2**20,
                "drafting_documents": len(self.documents.texts()),
                "tuned_documents": len(self.tuner.acceptance.tuned_documents()),
                "saved_files_mb": self.ngram.saved_bytes / 2**20}

    @property
    def costs(self) -> CostModel:
        """What the target's passes and the drafts cost, as measured."""
        return self.tuner.costs

    @property
    def context_tokens(self) -> int:
        """Tokens one sequence of the target's context holds: prompt and answer must fit."""
        return self.target.context.n_ctx

    @property
    def sequences(self) -> list[KVSequence]:
        """The live KV caches: the target's, and the draft model's while it serves."""
        return [self.target] + ([self.drafter.sequence] if self.drafter else [])

    def llama_ms(self) -> tuple[float, float]:
        """Time in llama_decode and in copying logits out, every live cache's context
        together, since they were made."""
        contexts = [sequence.context for sequence in self.sequences]
        return sum(c.decode_ms for c in contexts), sum(c.logits_ms for c in contexts)

    def cached_length(self, prompt: list[int]) -> int:
        """How much of `prompt` the target's cache already holds."""
        return common_prefix_length(self.target.tokens, prompt)

    def prefill(self, prompt: list[int], until: int | None = None) -> None:
        """Evaluate `prompt` but its last token into every cache now (with `until`, its
        first `until` tokens: a later call goes on), as generation would first, keeping
        the checkpoints generation would: for warming a document ahead of its first
        keystroke, and for timing generation apart from prompt evaluation."""
        for sequence in self.sequences:
            evaluate_in_pieces(sequence, prompt[:-1], PROMPT_PIECE, None, until=until)

    def reset(self) -> None:
        """Empty every cache: the live ones, the documents' saved ones and their texts for
        n-gram lookup (what was learnt of acceptance stays)."""
        self.documents.clear()
        for sequence in self.sequences:
            sequence.truncate(0)

    def drop_draft(self, error: Exception) -> None:
        """The draft model failed (a llama.cpp error in its context): go on with n-gram
        lookup and plain target steps, which need nothing from it, and say so in the stats."""
        log.warning("the draft model failed, decoding without it: %s", error)
        self.draft_failure = f"the draft model failed ({error}); completing with the target alone"
        self.drafter = None


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
    # The branches the proposal came with: where the workspace index's occurrences went
    # on otherwise, what the runner-up went on with. The plan's branches, those verified,
    # are the first tokens of some of them.
    offered: tuple[Branch, ...] = ()
    # A lookup's proposal past the plan's k: checked against what the target goes on to
    # make when it keeps the whole draft (tuning.Continuation).
    beyond: tuple[int, ...] = ()
    draft_error: Exception | None = None  # the draft model failed proposing: a plain step instead


PLAIN_ROUND = _Round(Plan(None, 0, 1.0, 0.0), None, NO_PROPOSAL)


@dataclass(frozen=True)
class RoundSettings:
    """What generate was asked for that each round needs."""

    mode: str
    sampling: Sampling
    document: str
    language: str
    draft_length: int | None  # fixes k, bypassing the tuner
    copy: CopyDrafter | None = None  # a rewrite's original, to copy drafts from
    # The draft model, while it serves this generation: a round it fails in reports the
    # error (RoundResult), and the rounds after go on without it.
    drafter: ModelDrafter | None = None
    cancel: threading.Event | None = None  # the request's: stops the draft model's catch-up too


def _choose(engine: Engine, tokens: list[int], room: int, asked: RoundSettings, rng: np.random.Generator,
            tree: bool) -> _Round:
    """Pick this round's provider and k (the tuner), and get its proposal; with `tree`,
    also the token-tree branches beside it that the tuner expects to pay."""
    allowed = DRAFT_MODES[asked.mode]
    most = min(MAX_DRAFT, room)
    if not allowed or most <= 0:
        return PLAIN_ROUND
    lookup_started = time.perf_counter()
    looks_up = bool({"ngram", "hybrid"} & set(allowed))
    found = engine.ngram.lookup(tokens, most) if looks_up else NO_MATCH
    copied = asked.copy.lookup(tokens, most) if looks_up and asked.copy is not None else NO_MATCH
    # The workspace index is its own provider: its matches are worse bets than the open
    # documents' at the same length (docs/bench.md, "The workspace index and long
    # copies"), so the tuner learns it apart. After a local match of 9+ tokens, the best
    # bet there is, it is not looked in.
    indexed = (engine.ngram.lookup_workspace(tokens, most, engine.model.n_vocab, found.length)
               if looks_up and found.length < INDEX_AFTER_MATCH else NO_MATCH)
    lookup_ms = (time.perf_counter() - lookup_started) * 1000
    hybrid_ngram = max(found.length, indexed.length, copied.length) >= engine.drafting.hybrid_min_match
    use_ngram = "ngram" in allowed or ("hybrid" in allowed and hybrid_ngram)
    use_model = asked.drafter is not None and ("draft" in allowed or ("hybrid" in allowed and not use_ngram))
    candidates = []  # preferred first
    for provider, match in (("ngram", found), ("index", indexed), ("copy", copied)):
        if use_ngram and match.tokens:
            candidates.append(Candidate(provider, match_bucket(match.length), len(match.tokens)))
    if use_model:
        candidates.append(Candidate("draft", 0, most))
    plan = engine.tuner.plan(candidates, asked.document, asked.language, asked.draft_length)
    if plan.provider is None:
        shadow = Proposal(found.tokens[:1], None, lookup_ms, found.length) if found.tokens and use_ngram else None
        return _Round(plan, None, NO_PROPOSAL, shadow)
    if plan.provider in LOOKUPS:
        match = {"ngram": found, "index": indexed, "copy": copied}[plan.provider]
        offered = tuple(Branch(step, continuation) for step, continuation in match.branches.items())
        if tree and offered and asked.draft_length is None:
            rows = engine.context_tokens - len(tokens) - plan.k  # the context's cells the tree may still take
            plan = engine.tuner.branched(plan, offered[:MAX_TREE_BRANCHES], asked.document, asked.language,
                                         match_bucket(match.length), most, rows)
        proposal = Proposal(match.tokens[: plan.k], None, lookup_ms, match.length)
        return _Round(plan, plan.provider, proposal, offered=offered, beyond=tuple(match.tokens[plan.k:]))
    try:
        return _Round(plan, "draft", asked.drafter.propose(tokens, plan.k, asked.sampling, rng, asked.cancel))
    except (RuntimeError, ValueError) as error:  # llama_decode failed, or the draft's context is full
        return replace(PLAIN_ROUND, draft_error=error)


def _verify(engine: Engine, tokens: list[int], chosen: _Round, asked: RoundSettings, rng: np.random.Generator,
            allowed: np.ndarray | None, keep_rows: bool) -> tuple[TreeVerdict, np.ndarray | None, float,
                                                                  Exception | None]:
    """The target scores [last, d1..dk] (and a token tree's branches) in one batch and
    accepts a prefix of the draft (and maybe of a branch after it); both caches are cut
    to what it accepted. `allowed`: the only tokens the first may be (healing). Returns
    (what it accepted, with `keep_rows` the rows that chose the new tokens
    [accepted + 1, V] (else None), ms, the draft model's error where cutting its cache failed)."""
    sampling, draft_error = asked.sampling, None
    draft = chosen.proposal.tokens
    scored = [tokens[-1], *draft]
    if draft:
        engine.target.expect_cut(len(scored))
    # The pass alone: a checkpoint and going back to it are costs of their own (CostModel.rejected).
    started = time.perf_counter()
    positions = list(range(len(scored)))
    rows = None
    branches = chosen.plan.branches
    if branches:  # greedy, as _choose only plans branches then
        # A branch replacing the draft from step s replaces scored[s + 1:].
        best, branch_best = engine.target.extend_tree(scored, [(b.step + 1, b.tokens) for b in branches])
        verdict = accept_tree(best, draft, branches, branch_best)
        if verdict.branch_index is None:
            engine.target.drop_branches()
        else:
            engine.target.take_branch(verdict.branch_index, len(tokens) + verdict.accepted, verdict.branch_tokens)
    elif sampling.greedy and allowed is None and not keep_rows:  # the argmax of each row is all it takes
        accepted, next_token = accept_greedy(engine.target.extend(scored, positions, argmax=True), draft)
        verdict = TreeVerdict(accepted, None, [], next_token)
    else:
        logits = engine.target.extend(scored, logits_at=positions)  # [k+1, V]
        if allowed is not None:
            logits = mask_to(logits[0], allowed)[None, :]
        if sampling.greedy:
            accepted, next_token = verify_greedy(logits, draft)
        else:
            accepted, next_token = verify_sampled(probabilities(logits, sampling), chosen.proposal.q, draft, rng)
        rows = logits[: accepted + 1] if keep_rows else None
        verdict = TreeVerdict(accepted, None, [], next_token)
    verify_ms = (time.perf_counter() - started) * 1000
    engine.target.truncate(len(tokens) + verdict.accepted + len(verdict.branch_tokens))
    if chosen.provider == "draft":
        # The draft evaluated last, d1..d(k-1): keep what the target accepted.
        try:
            asked.drafter.sequence.truncate(len(tokens) + verdict.accepted)
        except RuntimeError as error:
            draft_error = error
    return verdict, rows, verify_ms, draft_error


class RoundResult(NamedTuple):
    """What speculative_round returns."""

    new: list[int]  # the tokens the round added
    rows: np.ndarray | None  # with keep_rows, the target's rows that chose them [len(new), V]
    stats: RoundStats
    draft_error: Exception | None  # the draft model failed: the rounds after go on without it


def speculative_round(engine: Engine, tokens: list[int], room: int, asked: RoundSettings, rng: np.random.Generator,
                      allowed: np.ndarray | None = None,
                      keep_rows: bool = False) -> RoundResult:
    """One round: draft (the tuner picks the provider and k, at most `room`), verify,
    accept, truncate, and teach the tuner what it did. A first token constrained by
    healing (`allowed`) is a plain step: drafts know nothing of the constraint."""
    # Branches only at temperature 0: their rule is greedy, and without kept rows (accept_tree
    # reads argmaxes). Not with single-token verification: a kept branch's cells sit after
    # the draft's freed ones in llama.cpp's pool, attention sums over cells in pool order,
    # and later logits then differ from plain steps' in the last bits (measured:
    # docs/speculative-decoding.md, "Measurements behind the engine's constants"), so
    # output would not be plain decoding's exactly.
    # Nor where the model's state is recurrent: llama.cpp cannot share a prefix of it
    # between sequences (it copies a sequence's whole state, not the cells before a position).
    context = engine.target.context
    tree = (asked.sampling.greedy and not keep_rows and engine.drafting.tree_branches > 0
            and not context.single_token_eval and context.cuts_anywhere)
    chosen = PLAIN_ROUND if allowed is not None else _choose(engine, tokens, room, asked, rng, tree)
    verdict, rows, verify_ms, draft_error = _verify(engine, tokens, chosen, asked, rng, allowed, keep_rows)
    new = [*chosen.proposal.tokens[:verdict.accepted], *verdict.branch_tokens, verdict.next_token]
    made = _round_stats(chosen, verdict, len(new), verify_ms)
    _learn(engine, chosen, made, new, asked)
    return RoundResult(new, rows, made, chosen.draft_error or draft_error)


@dataclass(frozen=True, kw_only=True)
class GenerationRequest:
    """What generate is asked for."""

    prompt: list[int]  # the tokens to continue; a prompt longer than the context keeps its end
    max_tokens: int  # the most tokens to add
    stop: tuple[str, ...] = ()  # stop strings: generation ends at the first, which the text excludes
    time_budget_ms: float | None = None  # of predicting (prompt evaluation not counted); None: no limit
    sampling: Sampling = Sampling()
    mode: str = "auto"  # which draft providers may serve (config.DRAFT_MODES)
    # Checked between rounds and between the prompt's pieces: once set, no further round.
    cancel: threading.Event | None = None
    document: str = ""  # acceptance is learnt per document and language
    language: str = ""
    draft_length: int | None = None  # fixes k, bypassing the tuner (tests and measurements)
    done: Callable[[str], bool] | None = None  # done(text): the text is complete (it left the scope being written)
    # The first token is one of `healing.allowed`, and the text starts after `healing.text`.
    healing: Healing | None = None
    keep_logits: bool = False  # return the target's logits behind each token (to judge near ties)
    # The tokens of the text the output rewrites, to copy drafts from (or the copy drafter itself).
    copy_from: list[int] | CopyDrafter | None = None


def generate(engine: Engine, request: GenerationRequest) -> Generation:
    """Continue the request's prompt by up to its `max_tokens` tokens, round after round,
    until an end-of-generation token, a stop string, `done`, the time budget or `cancel`.
    The target's KV cache is reused for the longest common prefix with the last call."""
    if request.mode not in DRAFT_MODES:
        raise ValueError(f"unknown draft mode {request.mode!r}; modes: {', '.join(DRAFT_MODES)}")
    started = time.perf_counter()
    tokens = list(request.prompt[-(engine.context_tokens - 1):])  # a prompt longer than the context keeps its end
    asked = _start_rounds(engine, request, len(tokens))
    replayed = engine.target.replayed
    # cancelled: the loop stops before a round
    rewound = evaluate_in_pieces(engine.target, tokens[:-1], PROMPT_PIECE, request.cancel)
    rounds = _Rounds(len(tokens))
    try:
        _run_rounds(engine, request, asked, tokens, rounds)
    finally:
        if rounds.draft_error is not None:  # the draft model failed in a round: the engine goes on without it
            engine.drop_draft(rounds.draft_error)
    del tokens[rounds.prompt_length + request.max_tokens:]
    generated = tokens[rounds.prompt_length:]
    text = rounds.text if rounds.stop_reason == StopReason.STOP else generated_text(engine, generated, request.healing)
    stats = summarize(request.mode, rounds.made, len(generated), (time.perf_counter() - started) * 1000, rewound,
                      engine.target.replayed - replayed)
    ended = rounds.stop_reason == StopReason.END
    kept = _kept_logits(engine, rounds.rows, len(generated) + ended) if request.keep_logits else None
    return Generation(text, generated, rounds.stop_reason, stats, kept, rounds.end_token if ended else None)


@dataclass
class _Rounds:
    """A generation's rounds so far: what _run_rounds leaves for generate."""

    prompt_length: int
    made: list[RoundStats] = field(default_factory=list)  # what each round did
    rows: list[np.ndarray] = field(default_factory=list)  # with keep_logits, [produced, V] per round
    stop_reason: str = StopReason.MAX_TOKENS
    text: str = ""  # the text so far where a stop string or `done` read it
    end_token: int | None = None
    draft_error: Exception | None = None  # the draft model failed: the later rounds went on without it


def _run_rounds(engine: Engine, request: GenerationRequest, asked: RoundSettings, tokens: list[int],
                rounds: _Rounds) -> None:
    """Round after round onto `tokens` until a stop, recorded in `rounds`. A round the draft
    model fails in reports it, and the rounds after go on without it (the engine drops it
    once generation ends, Engine.drop_draft)."""
    rng = np.random.default_rng(request.sampling.seed)
    prompt_length, max_tokens, healing = rounds.prompt_length, request.max_tokens, request.healing
    predict_started = time.perf_counter()  # the time budget is for predicting, as llama.vim's t_max_predict_ms
    while len(tokens) - prompt_length < max_tokens:
        room = min(max_tokens - (len(tokens) - prompt_length), engine.context_tokens - len(tokens)) - 1
        stopped = _stop_before_round(request.cancel, request.time_budget_ms, predict_started, room)
        if stopped is not None:
            rounds.stop_reason = stopped
            return
        allowed = healing.allowed if healing is not None and len(tokens) == prompt_length else None
        new, logits, made, draft_error = speculative_round(engine, tokens, room, asked, rng, allowed,
                                                           request.keep_logits)
        if draft_error is not None:
            asked, rounds.draft_error = replace(asked, drafter=None), draft_error
        tokens.extend(new)
        rounds.made.append(made)
        if request.keep_logits:
            rounds.rows.append(logits)
        rounds.end_token = next((t for t in new if engine.model.is_end_of_generation(t)), None)
        rounds.stop_reason, rounds.text = stop_after_round(engine, tokens, prompt_length, request.stop, request.done,
                                                           healing)
        if rounds.stop_reason != StopReason.MAX_TOKENS:
            return


def _stop_before_round(cancel: threading.Event | None, time_budget_ms: float | None, predict_started: float,
                       room: int) -> StopReason | None:
    """Why no further round starts (None: one does). The time budget counts from
    `predict_started`: predicting, not the prompt's evaluation. `room`: the tokens a round
    may add beyond its next one."""
    if cancel is not None and cancel.is_set():
        return StopReason.CANCELLED
    if time_budget_ms is not None and (time.perf_counter() - predict_started) * 1000 >= time_budget_ms:
        return StopReason.TIME
    if room < 0:
        return StopReason.CONTEXT
    return None


def _start_rounds(engine: Engine, request: GenerationRequest, prompt_length: int) -> RoundSettings:
    """What a generation's rounds need: the request's settings, the draft model while it
    serves, copy drafting from `copy_from` (the rewrite starts after the prompt), and no
    proposal of an earlier generation still checked (its tokens say nothing of this one's)."""
    engine.tuner.continuations = []
    copy = request.copy_from or None
    if isinstance(copy, list):
        copy = CopyDrafter(copy, prompt_length, engine.drafting.ngram_max_match, engine.drafting.tree_branches)
    return RoundSettings(request.mode, request.sampling, request.document, request.language, request.draft_length,
                         copy=copy, drafter=engine.drafter, cancel=request.cancel)


def _kept_logits(engine: Engine, rows: list[np.ndarray], n: int) -> np.ndarray:
    """The first n of the rounds' logit rows, as one [n, V] array."""
    return np.concatenate([np.empty((0, engine.model.n_vocab), np.float32), *rows])[:n]


def stop_after_round(engine: Engine, tokens: list[int], prompt_length: int, stop: tuple[str, ...],
                      done: Callable[[str], bool] | None, healing: Healing | None) -> tuple[str, str]:
    """(why generation stops now, or "max_tokens" to go on; the text so far, "" when
    neither a stop string nor `done` reads it). An end token is cut from `tokens` with
    what followed it; a stop string from the text. Without stop strings or `done` no
    round reads the text: detokenizing the whole output every round costs plain
    decoding's rounds more than anything else outside llama.cpp."""
    produced = tokens[prompt_length:]
    end = next((i for i, t in enumerate(produced) if engine.model.is_end_of_generation(t)), None)
    if end is not None:
        del tokens[prompt_length + end:]
        return StopReason.END, ""
    if not any(stop) and done is None:
        return StopReason.MAX_TOKENS, ""
    text = generated_text(engine, produced, healing)
    cut = min((text.find(s) for s in stop if s and s in text), default=-1)
    if cut >= 0:
        return StopReason.STOP, text[:cut]
    if done is not None and done(text):
        return StopReason.DONE, text
    return StopReason.MAX_TOKENS, text


def generated_text(engine: Engine, generated: list[int], healing: Healing | None) -> str:
    """The generated text, less the bytes healing backed up over (the user typed them),
    and less a character whose last bytes were not generated."""
    text = engine.model.detokenize(generated, whole_characters=True)
    return text[len(healing.text):] if healing is not None else text


def _round_stats(chosen: _Round, verdict: TreeVerdict, produced: int, verify_ms: float) -> RoundStats:
    """What the round did, from what it chose and what the target accepted."""
    drafted, accepted = len(chosen.proposal.tokens), verdict.accepted
    provider = chosen.provider if drafted else None
    offered = next((b for b in chosen.offered if b.step == accepted), None) if accepted < drafted else None
    # The target's token where the draft parted: a branch's first, if one was taken.
    parted = verdict.branch_tokens[0] if verdict.branch_index is not None else verdict.next_token
    return RoundStats(provider, drafted, accepted, produced,
                      match_length=chosen.proposal.match_length if provider in LOOKUPS else 0,
                      predicted_tokens=chosen.plan.predicted_tokens if provider else 1.0,
                      verify_ms=verify_ms, draft_ms=chosen.proposal.draft_ms + chosen.proposal.catch_up_ms,
                      branch_rows=sum(len(branch.tokens) for branch in chosen.plan.branches),
                      branch_taken=verdict.branch_index is not None,
                      branch_hit=None if offered is None else parted == offered.tokens[0])


def _learn(engine: Engine, chosen: _Round, made: RoundStats, new: list[int], asked: RoundSettings) -> None:
    """The round into the tuner: its costs and acceptance, whether a proposal it passed
    over would have held, whether an offered branch started with the target's token,
    and how far the proposals of rounds whose whole draft held went on holding."""
    bucket = match_bucket(made.match_length) if made.provider in LOOKUPS else 0
    engine.tuner.observe(Trial(made.provider, bucket, made.drafted, made.accepted, made.produced, made.verify_ms,
                               chosen.proposal.draft_ms, made.branch_rows), asked.document, asked.language)
    if chosen.shadow is not None:
        engine.tuner.observe_shadow(match_bucket(chosen.shadow.match_length), chosen.shadow.tokens[0] == new[-1],
                                    asked.document, asked.language)
    whole = made.provider in LOOKUPS and made.accepted == made.drafted and not made.branch_taken
    started = Continuation(made.provider, bucket, made.drafted, chosen.beyond) if whole and chosen.beyond else None
    engine.tuner.follow(new, started, asked.document, asked.language)
    if made.branch_hit is not None:
        engine.tuner.observe_branch(made.branch_hit)

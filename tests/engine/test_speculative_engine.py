"""The speculative engine on the real smol pair: lossless at temperature 0 and in
distribution above it, caches that hold exactly the accepted tokens, and a tuner
that gives up on a draft that does not pay."""

import sysconfig
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest, chisquare

from completer.engine.generation import PROMPT_PIECE, Engine, GenerationRequest, generate
from completer.engine.kv import KVSequence
from completer.engine.speculative import NEAR_TIE_LOGITS, Sampling, parting_gap, probabilities
from completer.engine.tuning import CostModel
from completer.engine.workspace_index import TokenTable, WorkspaceIndex
from completer.models.llama import LlamaContext, LlamaModel

pytestmark = pytest.mark.slow  # minutes of real model passes: the full suite's, not the fast tier's

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# A KV cache filled by single-token steps gives logits some way off those of one filled
# in one batch (llama.cpp's one-token kernel sums in another order than its batched
# one): this bound allows for that. Bookkeeping errors are caught exactly instead:
# llama.cpp refuses positions that do not follow the cache's last one, and the token
# lists are compared.
NUMERICS_BOUND = 1.5


def stdlib_holes(count: int, prompt_chars: int = 1500) -> list[str]:
    """Prompts that end at the start of a `def` line's body in real stdlib files."""
    holes = []
    for name in ["json/encoder.py", "textwrap.py", "string.py", "shlex.py", "fractions.py", "colorsys.py"]:
        text = (STDLIB / name).read_text()
        at = text.find("\n    def ", len(text) // 3)
        at = text.find("\n", at + 1) + 1  # after the def line
        holes.append(text[max(0, at - prompt_chars) : at])
    return holes[:count]


@pytest.fixture(scope="module")
def engine(target, draft):
    return Engine(target, draft, n_ctx=2048, calibrate_s=0.3)


# The configurations a greedy run is checked in: (mode, k), k None lets the tuner choose.
GREEDY_CONFIGURATIONS = [("ngram", None), ("draft", 1), ("draft", 3), ("draft", 6), ("hybrid", None), ("auto", None),
                         ("auto", 8)]


@pytest.fixture(scope="module")
def drafts(smol, distilled, tempered) -> dict[str, Path]:
    """The smol pair's derived draft (rarely accepted), a short distillation of it, and
    the target tempered, which agrees with it at temperature 0 but at near ties: long rounds."""
    return {"derived": smol.draft, "distilled": distilled[1], "tempered": tempered}


@pytest.mark.parametrize("draft", ["derived", "distilled", "tempered"])
def test_with_single_token_verification_greedy_speculation_is_plain_decoding(target, drafts, draft):
    """One token per target decode: a verify batch gets the logits of plain steps, so
    every mode, at every k, must give plain decoding's tokens, with no near-tie allowance."""
    engine = Engine(target, LlamaModel(drafts[draft]), n_ctx=2048, calibrate_s=0, exact=True)
    drafted = accepted = 0
    for hole in stdlib_holes(3, prompt_chars=600):
        prompt = target.tokenize(hole)
        plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=32, mode="target")).tokens
        for mode, k in GREEDY_CONFIGURATIONS:
            fast = generate(engine, GenerationRequest(prompt=prompt, max_tokens=32, mode=mode, draft_length=k))
            assert fast.tokens == plain, f"{mode} at k={k} parted from plain decoding"
            drafted, accepted = drafted + fast.stats.drafted, accepted + fast.stats.accepted
    assert drafted > 100 and accepted > 0  # speculation ran, and some of it was kept


def test_a_line_written_over_and_over_is_copied_on_past_the_texts_end_as_plain_decoding_writes_it(target):
    """smol writing `#` lines over and over (as it did in edits from attrs's history):
    n-gram lookup's proposal goes on from itself past the text's end, so a round keeps
    its whole draft of 32, where a proposal that stopped at the text's end held 2 tokens
    a round; with one token per target decode the output is plain decoding's."""
    engine = Engine(target, None, n_ctx=1024, calibrate_s=0, exact=True)
    prompt = target.tokenize("# Options\n" + "#\n" * 40)
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=99, mode="target"))
    assert target.detokenize(plain.tokens).startswith("#\n" * 8)  # the loop this is about
    copied = generate(engine, GenerationRequest(prompt=prompt, max_tokens=99, mode="ngram", draft_length=32))
    assert copied.tokens == plain.tokens
    assert copied.stats.target_passes <= 4 and copied.stats.accepted == copied.stats.drafted


@pytest.mark.parametrize("mode,draft_length", [("ngram", None), ("draft", None), ("draft", 4), ("hybrid", None),
                                               ("auto", None), ("auto", 6)])
def test_greedy_speculation_equals_plain_decoding_up_to_near_ties(engine, target, mode, draft_length):
    """Batched verification: outputs may part only where the two tokens that parted are
    within NEAR_TIE_LOGITS of each other in plain decoding's own logits there (see
    completer/engine/speculative.py for the measurement)."""
    for hole in stdlib_holes(4):
        prompt = target.tokenize(hole)
        plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=32, mode="target", keep_logits=True))
        fast = generate(engine, GenerationRequest(prompt=prompt, max_tokens=32, mode=mode, draft_length=draft_length,
                                                  keep_logits=True))
        if fast.tokens == plain.tokens:
            continue
        gap = parting_gap(plain.logits, fast.logits.argmax(axis=1))
        assert gap is not None and gap < NEAR_TIE_LOGITS, f"{mode}: parted where plain preferred its token by {gap}"


def forked_index(prompt: list[int], plain: list[int], fork: int) -> WorkspaceIndex:
    """A workspace index whose files go on from the prompt's end mostly (3 copies) with
    plain decoding's text but one token changed at `fork`, and less often (2) with
    plain's own: its proposal is wrong there, and the runner-up's branch is right."""
    wrong = [*plain[:fork], plain[fork] + 1, *plain[fork + 1:]]
    files = [prompt[-12:] + wrong] * 3 + [prompt[-12:] + plain] * 2
    index = WorkspaceIndex()
    index.table = TokenTable([(f"file{i}", np.array(tokens, np.int32)) for i, tokens in enumerate(files)])
    return index


def test_a_token_tree_takes_the_runner_up_where_the_target_goes_and_stays_lossless(target):
    """On a flat cost curve (a batch costs what a token does, as on a GPU) the tuner
    verifies the index's branch beside its proposal; where the proposal is wrong the
    branch carries on, the cache holds exactly the text, and the output is plain
    decoding's up to near ties. With single-token verification no tree is verified
    (kept branch cells would sum in another order than plain steps' cells: no longer exact)."""
    # Flat it stays: real rounds' times are not learnt into it (smoothing 0).
    flat = CostModel(verify_ms={n: 10.0 for n in range(1, 65)}, smoothing=0.0)
    engine = Engine(target, None, n_ctx=2048, costs=flat)
    exact = Engine(target, None, n_ctx=2048, costs=replace(flat), exact=True)
    taken = 0
    for hole in stdlib_holes(4, prompt_chars=600):
        prompt = target.tokenize(hole)
        plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=32, mode="target", keep_logits=True))
        engine.ngram.workspace = exact.ngram.workspace = forked_index(prompt, plain.tokens, fork=5)
        fast = generate(engine, GenerationRequest(prompt=prompt, max_tokens=32, mode="ngram"))
        if fast.tokens != plain.tokens:
            gap = parting_gap(plain.logits, np.array(fast.tokens))
            assert gap is not None and gap < NEAR_TIE_LOGITS, f"parted where plain preferred its token by {gap}"
        text = prompt + fast.tokens
        held = engine.target
        assert held.tokens[: len(text)] == text[: len(held.tokens)]  # it may run past the cut, never off the text
        held.truncate(len(text) - 1)
        assert_cache_holds(held, text[: len(held.tokens)])
        taken += fast.stats.branches_taken
        # On a flat curve every fork inside the draft is verified: where the target took the
        # runner-up's token, its branch carried the round. Unless the batched pass parted
        # from plain decoding at a near tie before the fork (a fresh CI run's did at the
        # first token of a hole): then the index's text was not the output's to branch in.
        assert fast.stats.branches_taken == fast.stats.branch_hits
        if fast.tokens[:6] == plain.tokens[:6]:
            assert fast.stats.tree_rounds >= 1 and fast.stats.branch_rows >= 1
        assert generate(exact, GenerationRequest(prompt=prompt, max_tokens=32, mode="ngram")).stats.tree_rounds == 0
    # The branch carried the round where the proposal parted (in a hole where the batched
    # pass did not part from plain decoding at a near tie before the fork).
    assert taken >= 2


def test_a_round_cut_by_the_token_limit_keeps_plain_decodings_tokens(target, tempered):
    """A limit inside what a round could draft (the tempered draft is accepted, so
    rounds run long): the text stops exactly at the limit and is plain decoding's start."""
    engine = Engine(target, LlamaModel(tempered), n_ctx=2048, calibrate_s=0, exact=True)
    prompt = target.tokenize(stdlib_holes(1)[0])
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=24, mode="target")).tokens
    for limit in (1, 5, 7):
        for mode, k in [("draft", 6), ("draft", 15), ("auto", None)]:
            cut = generate(engine, GenerationRequest(prompt=prompt, max_tokens=limit, mode=mode, draft_length=k))
            assert cut.tokens == plain[:limit] and cut.stop_reason == "max_tokens", (limit, mode, k)


def test_the_target_as_its_own_draft_is_rejected_only_at_near_ties(smol, target):
    """The draft is the target, so it proposes the target's own greedy tokens; one is
    rejected only where the draft's one-token pass and the target's batched pass break
    a near tie apart: there the target's top two logits are within NEAR_TIE_LOGITS.
    (On a 2-core AMD EPYC with AVX2, 5 of 79 drafted tokens were.) The generation's
    totals are its rounds': each kept all it produced but the target's own token."""
    engine = Engine(target, target, n_ctx=2048, calibrate_s=0)
    accepted = drafted = 0
    for hole in stdlib_holes(3):
        result = generate(engine, GenerationRequest(prompt=target.tokenize(hole), max_tokens=32, mode="draft",
                                                    draft_length=4, keep_logits=True))
        made_before = 0
        for provider, k, _, _, made in result.stats.rounds:
            rejected_at = made_before + made - 1  # the target's own token, where it parted from the draft
            if provider is not None and made - 1 < k and rejected_at < len(result.logits):
                second, first = np.sort(result.logits[rejected_at])[-2:]
                assert first - second < NEAR_TIE_LOGITS
            made_before += made
        drafts = [(k, made) for provider, k, _, _, made in result.stats.rounds if provider is not None]
        assert result.stats.drafted == sum(k for k, _ in drafts)
        assert result.stats.accepted == sum(made - 1 for _, made in drafts)
        accepted, drafted = accepted + result.stats.accepted, drafted + result.stats.drafted
    assert drafted >= 40
    assert accepted / drafted >= 0.85


def assert_cache_holds(sequence, text: list[int]) -> None:
    """The sequence holds exactly the accepted text, as llama.cpp sees it too, and one
    more step gives the logits of a fresh evaluation of that text."""
    held = list(sequence.tokens)
    assert held == text
    assert sequence.context.length() == len(held)
    got = sequence.extend([198], logits_at=[0])[0]
    fresh = LlamaContext(sequence.context.model, n_ctx=2048).eval(held + [198], 0, logits_at=[-1])[0]
    assert np.abs(got - fresh).max() <= NUMERICS_BOUND


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, seed=3)])
def test_after_rejections_the_caches_hold_exactly_the_accepted_tokens(engine, target, sampling):
    prompt = target.tokenize(stdlib_holes(1)[0])
    result = generate(engine, GenerationRequest(prompt=prompt, max_tokens=40, mode="draft", draft_length=5,
                                                sampling=sampling))
    assert result.stats.accepted < result.stats.drafted  # the derived draft was rejected, the case to test
    assert result.stop_reason == "max_tokens"
    # Stopping cuts the text at 40 tokens; the caches may run past the cut, never off the text.
    text = prompt + result.tokens
    for sequence in (engine.target, engine.drafter.sequence):
        assert sequence.tokens[: len(text)] == text[: len(sequence.tokens)]
        sequence.truncate(len(text) - 1)
        assert_cache_holds(sequence, text[: len(sequence.tokens)])


# Above temperature 0: the tempered draft proposes from a flatter distribution than the
# target's, overlapping it partially, and both engines verify one token per decode, so
# that the target's distribution below is computed with the numerics the engine samples
# with, and any departure from it is the rule's.
SAMPLING = Sampling(temperature=0.9, top_p=0.95)
SAMPLING_PROMPT = "def total(values):\n    result = 0\n    for "


def exact_continuations(model: LlamaModel, prompt: list[int], length: int, least: float) -> dict[tuple, float]:
    """The target's probability of each continuation of `length` tokens whose
    probability is at least `least`, under SAMPLING; a continuation an end token stops
    is keyed by its tokens before it, as generate returns it."""
    context = LlamaContext(model, n_ctx=512, single_token_eval=True)
    context.eval(prompt[:-1], 0)
    found: dict[tuple, float] = {}

    def walk(prefix: list[int], mass: float) -> None:
        position = len(prompt) - 1 + len(prefix)  # where the last token is evaluated
        context.truncate(position)
        p = probabilities(context.eval([prefix[-1] if prefix else prompt[-1]], position, logits_at=[0]), SAMPLING)[0]
        for token in np.flatnonzero(p * mass >= least):
            if model.is_end_of_generation(int(token)):
                found[tuple(prefix)] = found.get(tuple(prefix), 0.0) + mass * p[token]
            elif len(prefix) + 1 == length:
                found[(*prefix, int(token))] = mass * p[token]
            else:
                walk([*prefix, int(token)], mass * p[token])

    walk([], 1.0)
    return found


def test_sampling_with_a_partly_agreeing_draft_has_the_targets_joint_distribution(target, tempered):
    """1,000 continuations of three tokens, each from rounds of k = 3 drafted tokens:
    their joint distribution against the target's own, by chi-square. A wrong residual,
    an inverted ratio or a wrong row of q moves many of these cells."""
    engine = Engine(target, LlamaModel(tempered), n_ctx=512, calibrate_s=0, exact=True)
    prompt = target.tokenize(SAMPLING_PROMPT)
    samples, drafted, accepted = Counter(), 0, 0
    n = 1000
    for seed in range(n):
        # max_tokens 4 leaves room for k = 3 in the first round; the first three tokens are judged.
        result = generate(engine, GenerationRequest(prompt=prompt, max_tokens=4, sampling=replace(SAMPLING, seed=seed),
                                                    mode="draft", draft_length=3))
        samples[tuple(result.tokens[:3])] += 1
        drafted, accepted = drafted + result.stats.drafted, accepted + result.stats.accepted
    assert 0.3 <= accepted / drafted <= 0.8, accepted / drafted  # both sides of min(1, p/q) are exercised
    exact = exact_continuations(target, prompt, 3, least=5 / n)
    cells = sorted(exact, key=exact.get, reverse=True)
    observed = [samples[cell] for cell in cells] + [n - sum(samples[cell] for cell in cells)]
    expected = [n * exact[cell] for cell in cells] + [n * (1 - sum(exact.values()))]
    assert len(cells) >= 10
    assert chisquare(observed, expected).pvalue > 0.001, list(zip(observed, expected))


def test_a_drafted_token_is_accepted_with_probability_one_less_the_total_variation(target, tempered):
    """The rule's acceptance is the largest any lossless rule can have: sum(min(p, q)).
    A rule that keeps the distribution but treats the model's proposal as a point mass
    (accepting with p(d)) accepts less, and fails here."""
    engine = Engine(target, LlamaModel(tempered), n_ctx=512, calibrate_s=0, exact=True)
    prompt = target.tokenize(SAMPLING_PROMPT)
    p = probabilities(LlamaContext(target, n_ctx=512, single_token_eval=True).eval(prompt, 0, logits_at=[-1]),
                      SAMPLING)[0]
    draft = LlamaContext(LlamaModel(tempered), n_ctx=512)  # as the drafter: the prompt's prefill, then its last token
    draft.eval(prompt[:-1], 0)
    q = probabilities(draft.eval(prompt[-1:], len(prompt) - 1, logits_at=[0]), SAMPLING)[0]
    n = 800
    # max_tokens 2: one round of one drafted token.
    accepted = sum(generate(engine, GenerationRequest(prompt=prompt, max_tokens=2,
                                                      sampling=replace(SAMPLING, seed=seed), mode="draft",
                                                      draft_length=1)).stats.accepted for seed in range(n))
    assert binomtest(accepted, n, np.minimum(p, q).sum()).pvalue > 0.001, (accepted / n, np.minimum(p, q).sum())


def test_a_draft_that_does_not_pay_is_abandoned(target, draft):
    """The derived draft is untrained: the tuner must stop drafting soon."""
    engine = Engine(target, draft, n_ctx=2048, calibrate_s=0.3)
    speculative = passes = 0
    for hole in stdlib_holes(4):
        stats = generate(engine, GenerationRequest(prompt=target.tokenize(hole), max_tokens=48, mode="draft",
                                                   document="a.py", language="python")).stats
        speculative, passes = speculative + stats.speculative_rounds, passes + stats.target_passes
    assert speculative <= 0.2 * passes


def test_stops_at_a_stop_string_a_time_budget_and_a_cancel(engine, target):
    prompt = target.tokenize(stdlib_holes(1)[0])
    stopped = generate(engine, GenerationRequest(prompt=prompt, max_tokens=48, stop=("\n",), mode="auto"))
    assert stopped.stop_reason == "stop" and "\n" not in stopped.text
    assert generate(engine, GenerationRequest(prompt=prompt, max_tokens=48, time_budget_ms=0)).stop_reason == "time"
    cancel = threading.Event()
    cancel.set()
    cancelled = generate(engine, GenerationRequest(prompt=prompt, max_tokens=48, cancel=cancel))
    assert cancelled.stop_reason == "cancelled" and cancelled.tokens == []


class CancelledAfter(threading.Event):
    """A cancel flag that is set from its (checks + 1)-th look on: a newer request that
    comes while the prompt is being evaluated."""

    def __init__(self, checks: int):
        super().__init__()
        self.checks_left = checks

    def is_set(self) -> bool:
        self.checks_left -= 1
        return self.checks_left < 0 or super().is_set()


def test_a_cancel_stops_the_prompt_evaluation_at_the_next_piece(engine, target):
    """A newer request does not wait for the rest of a long prompt (thousands of tokens
    take seconds here): evaluation goes a piece at a time and stops at the flag, keeping
    what went in; a generation cancelled before it starts evaluates nothing."""
    prompt = target.tokenize(stdlib_holes(1, prompt_chars=4000)[0])
    assert len(prompt) > 3 * PROMPT_PIECE
    engine.reset()
    assert generate(engine, GenerationRequest(prompt=prompt, max_tokens=8,
                                              cancel=CancelledAfter(0))).stop_reason == "cancelled"
    assert engine.target.tokens == []
    assert generate(engine, GenerationRequest(prompt=prompt, max_tokens=8,
                                              cancel=CancelledAfter(2))).stop_reason == "cancelled"
    assert engine.target.tokens == prompt[:2 * PROMPT_PIECE]
    finished = generate(engine, GenerationRequest(prompt=prompt, max_tokens=8))  # the next request goes on from there
    assert finished.stop_reason != "cancelled" and engine.target.tokens[:len(prompt)] == prompt


def test_an_unknown_mode_is_refused(engine, target):
    with pytest.raises(ValueError, match="unknown draft mode 'fast'"):
        generate(engine, GenerationRequest(prompt=target.tokenize("x = 1"), max_tokens=4, mode="fast"))


def test_a_draft_that_fails_mid_session_leaves_the_target_completing_alone(smol, target):
    engine = Engine(target, LlamaModel(smol.draft), n_ctx=1024, calibrate_s=0)
    prompt = target.tokenize(stdlib_holes(1)[0])
    assert len(prompt) > 100
    # A real llama.cpp context too small for the prompt: the draft's next evaluation fails.
    engine.drafter.sequence = KVSequence(LlamaContext(engine.drafter.sequence.context.model, n_ctx=64))
    failed = generate(engine, GenerationRequest(prompt=prompt, max_tokens=24, mode="draft", draft_length=3))
    assert engine.drafter is None and "the draft model failed" in engine.draft_failure
    plain = generate(Engine(target, None, n_ctx=1024, calibrate_s=0), GenerationRequest(prompt=prompt, max_tokens=24,
                                                                                        mode="target"))
    assert failed.tokens == plain.tokens  # nothing lost: the target's own text
    assert generate(engine, GenerationRequest(prompt=prompt, max_tokens=8,
                                              mode="draft")).tokens == plain.tokens[:8]  # and it goes on serving

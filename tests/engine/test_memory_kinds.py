"""The engine's rules on every kind of model memory: full attention (smol), sliding-window
attention (Gemma 3), hybrid with llama.cpp's own rollback (qwen35), hybrid without it
(granitehybrid) and recurrent (mamba2). The last three are random-weight models
(models/synthetic.py): their text means nothing, but greedy decoding is deterministic,
and their state cannot be cut at any position the way a KV cache can. A rejected draft
and an edit are cuts; the engine takes them back with llama.cpp's rollback snapshots or
its own checkpoints (completer/engine/kv.py), and the answers must be a fresh
evaluation's."""

import json
import threading
from dataclasses import replace

import numpy as np
import pytest

from completer.bench.run import target_copy, with_every_nth_changed
from completer.config import CacheOptions, Config
from completer.decoders.local import LocalDecoder
from completer.decoders.decoder import Decode, Decoded
from completer.engine.drafts import ModelDrafter
from completer.engine.generation import MAX_TREE_BRANCHES, PROMPT_PIECE, Engine, GenerationRequest, generate
from completer.engine.kv import CHECKPOINT_SPACING, KVSequence, evaluate_in_pieces
from completer.engine.speculative import Sampling
from completer.engine.tuning import CostModel
from completer.models.llama import (HYBRID, RECURRENT, ROLLBACK_ARCHITECTURES, SLIDING_WINDOW, LlamaContext,
                                    LlamaModel)
from completer.models.synthetic import write_model
from conftest import run_completer

pytestmark = pytest.mark.slow  # minutes of real models, the synthetic ones written first

BATCH_TOLERANCE = 1e-3  # llama.cpp's logits for one text filled by different batches
TEXT = open(__file__.replace("tests/engine/test_memory_kinds.py", "completer/engine/kv.py")).read()
SYNTHETIC = ("qwen35", "granitehybrid", "mamba2")


@pytest.fixture(scope="session")
def synthetic_models(tmp_path_factory) -> dict[str, LlamaModel]:
    folder = tmp_path_factory.mktemp("synthetic")
    with pytest.MonkeyPatch.context() as patch:  # the vocabularies are taken into this cache, not the user's
        patch.setenv("COMPLETER_CACHE_DIR", str(folder / "cache"))
        return {arch: LlamaModel(write_model(folder / f"{arch}.gguf", arch, "tiny"), n_gpu_layers=0)
                for arch in SYNTHETIC}


def loaded(request, name: str) -> LlamaModel:
    if name in SYNTHETIC:
        return request.getfixturevalue("synthetic_models")[name]
    return request.getfixturevalue({"smol": "target", "gemma": "gemma_target"}[name])


@pytest.fixture(params=["smol", "gemma", *SYNTHETIC])
def model(request) -> LlamaModel:
    return loaded(request, request.param)


def prompt_of(model: LlamaModel, tokens: int = 240) -> list[int]:
    return model.tokenize(TEXT)[:tokens]


def test_the_memory_kinds_are_told_apart(synthetic_models, target, gemma_target):
    kinds = {arch: model.memory for arch, model in synthetic_models.items()}
    assert kinds == {"qwen35": HYBRID, "granitehybrid": HYBRID, "mamba2": RECURRENT}
    assert (target.memory, gemma_target.memory) == ("full attention", "sliding window")
    rollback = {arch: LlamaContext(model, n_ctx=256, rollback_tokens=8).rollback_tokens
                for arch, model in synthetic_models.items()}
    assert rollback == {"qwen35": 8, "granitehybrid": 0, "mamba2": 0}  # llama.cpp's own rollback: qwen35's alone
    assert {arch for arch in SYNTHETIC if arch in ROLLBACK_ARCHITECTURES} == {"qwen35"}
    # No sequences for branches where trees and candidates are off: each would hold a
    # recurrent state per rollback snapshot.
    branches = {arch: Engine(model, None, n_ctx=256, calibrate_s=0).target.context.branches
                for arch, model in {**synthetic_models, "smol": target}.items()}
    assert branches == {"qwen35": 0, "granitehybrid": 0, "mamba2": 0, "smol": MAX_TREE_BRANCHES}
    # llama.cpp's rollback snapshots cost every batch: on the CPU (these models have no GPU
    # layers) a rejection goes back to a checkpoint instead.
    assert Engine(synthetic_models["qwen35"], None, n_ctx=256, calibrate_s=0).target.context.rollback_tokens == 0


@pytest.mark.parametrize("arch,cuts", [("qwen35", "with GPU layers, a rejected draft of up to 15 tokens: "
                                                  "llama.cpp's rollback; every other cut (all on the CPU"),
                                       ("granitehybrid", "llama.cpp has no rollback for granitehybrid"),
                                       ("mamba2", "llama.cpp has no rollback for mamba2")])
def test_models_info_says_how_each_model_is_cut_and_that_trees_are_off(synthetic_models, arch, cuts):
    shown = run_completer("models", "info", str(synthetic_models[arch].path), env={"COLUMNS": "400"}).stdout
    assert ("hybrid: recurrent layers" if arch != "mamba2" else "recurrent: no attention") in shown
    assert cuts in shown and "trees, candidates\toff: llama.cpp cannot share" in shown, shown


@pytest.mark.parametrize("name", SYNTHETIC)
def test_a_copy_of_targets_tokens_is_rejected_exactly_where_it_was_changed(request, name):
    """What `bench --copy-target` drafts from: at 1 every drafted token is accepted; at
    0.8 (every 5th token changed) each round that ends in a rejection ends at a changed
    token, and the output is plain decoding's. On the random-weight models, whose text
    is never in the prompt, n-gram lookup finds nothing, so the copy drafts each round
    (smol's text repeats the prompt's, and lookup in it took most rounds)."""
    model = loaded(request, name)
    engine = Engine(model, None, n_ctx=1024, calibrate_s=0, exact=True)
    prompt = prompt_of(model)
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=40, mode="target")).tokens
    for fraction, draft_length in ((1.0, 4), (0.8, 3), (0.8, 6)):
        fast = generate(engine, GenerationRequest(prompt=prompt, max_tokens=40, mode="ngram",
                                                  draft_length=draft_length,
                                                  copy_from=target_copy(plain, fraction, len(prompt))))
        assert fast.tokens == plain
        assert sum(k for provider, k, *_ in fast.stats.rounds if provider == "copy") >= 10
        at, rejected_at = 0, []
        for provider, k, _, _, produced in fast.stats.rounds:
            if provider == "copy" and produced - 1 < k:
                rejected_at.append(at + produced - 1)
            at += produced
        if fraction == 1.0:
            assert rejected_at == []
        else:
            assert rejected_at and all(position % 5 == 0 for position in rejected_at), rejected_at


def test_bench_copy_target_runs_the_modes_on_a_copy_of_targets_tokens(synthetic_models, tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "kv.py").write_text(TEXT)
    report = tmp_path / "bench.json"
    result = run_completer("bench", str(tmp_path / "repo"), "--target", str(synthetic_models["qwen35"].path),
                           "--modes", "target,ngram,auto", "--copy-target", "0.8", "--exact", "--n", "2",
                           "--max-tokens", "24", "--report", str(report), timeout=600)
    assert result.returncode == 0, result.stderr
    assert "drafts copy target, 0.8 of its tokens right" in result.stdout
    written = json.loads(report.read_text())
    assert written["settings"]["copy_target"] == 0.8
    assert all(r["identical"] for r in written["records"]), written["records"]
    assert any(r["drafted"] for r in written["records"] if r["mode"] != "target")


# Every length on the models whose state cannot be cut; one on the attention models,
# whose cuts test_both_models.py covers at length.
@pytest.mark.parametrize("name,draft_length", [*((arch, k) for arch in SYNTHETIC for k in (1, 3, 8, 20)),
                                               ("smol", 8), ("gemma", 8)])
def test_forced_drafts_of_every_length_rejected_anywhere_give_plain_decodings_tokens(request, name, draft_length):
    """Single-token verification: the target's logits are plain steps' to the bit, so any
    difference is a state the engine failed to take back. The drafts copy plain
    decoding's own output with every 5th token changed: each round is rejected at a
    different place, from the first drafted token to the last."""
    model = loaded(request, name)
    engine = Engine(model, None, n_ctx=1024, calibrate_s=0, exact=True)
    prompt = prompt_of(model)
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=40, mode="target")).tokens
    for offset in (0, 2):
        fast = generate(engine, GenerationRequest(prompt=prompt, max_tokens=40, mode="ngram",
                                                  draft_length=draft_length,
                                                  copy_from=with_every_nth_changed(plain, 5, offset)))
        parted = next((i for i, (a, b) in enumerate(zip(fast.tokens, plain)) if a != b), None)
        assert fast.tokens == plain, f"parted at {parted}"
        assert fast.stats.accepted > 0 and fast.stats.drafted > fast.stats.accepted
        if not engine.target.context.cuts_anywhere:
            assert fast.stats.replayed > 0  # the rejections went back to checkpoints


def test_a_verify_batch_cut_back_leaves_a_fresh_evaluations_logits(model):
    """Batched verification, as a server runs: a batch of 12 drafted tokens cut back to
    its first 5 (qwen35: within llama.cpp's rollback snapshots; the others: to a
    checkpoint, and the 5 evaluated again), then the next tokens' logits."""
    prompt, drafted, after = prompt_of(model, 200), prompt_of(model, 260)[200:212], prompt_of(model, 280)[265:275]
    sequence = KVSequence(LlamaContext(model, n_ctx=512, rollback_tokens=16), budget=256)
    sequence.extend(prompt)
    sequence.expect_cut(len(drafted))
    sequence.extend(drafted, logits_at=range(len(drafted)))
    sequence.truncate(len(prompt) + 5)
    assert sequence.consistent and sequence.tokens == prompt + drafted[:5]
    if model.architecture == "qwen35":
        assert sequence.replayed == 0  # llama.cpp rolled it back itself
    got = sequence.extend(after, logits_at=range(len(after)))
    # Gemma's logits move by up to 1.2 between one batch of a text and the same text in
    # two, or in batches of other sizes: there the fresh context is batched as here, and
    # cut by llama.cpp directly. The recurrent models' held within the tolerance.
    fresh = LlamaContext(model, n_ctx=512)
    if model.memory == SLIDING_WINDOW:
        fresh.eval(prompt, 0)
        fresh.eval(drafted, len(prompt))
        assert fresh.cut(len(prompt) + 5)
    else:
        fresh.eval(prompt + drafted[:5], 0)
    expected = fresh.eval(after, len(prompt) + 5, logits_at=range(len(after)))
    assert np.abs(got - expected).max() <= BATCH_TOLERANCE
    assert (got.argmax(axis=1) == expected.argmax(axis=1)).all()


def test_edits_anywhere_in_a_cached_document_give_a_fresh_evaluations_answer(model):
    """A document typed in: an edit far up, then keystrokes on one line (the checkpoints
    at that line serve them), then a line deleted above. Each answer is a fresh engine's."""
    engine = Engine(model, None, n_ctx=1024, calibrate_s=0, exact=True)
    fresh = Engine(model, None, n_ctx=1024, calibrate_s=0, exact=True)
    text = prompt_of(model, 220)
    line = text.index(next(t for t in text[150:] if model.breaks_line(t)), 150) + 1
    edits = [text, text[:30] + text[40:50] + text[30:], ]
    typed = edits[-1]
    for step in range(1, 6):  # keystrokes: one more token of the next line each time
        edits.append(typed[:line + 10] + text[60:60 + step] + typed[line + 10:])
    edits.append(edits[-1][:20] + edits[-1][29:])
    rewound = []
    for prompt in edits:
        got = generate(engine, GenerationRequest(prompt=prompt, max_tokens=12, mode="target"))
        assert got.tokens == generate(fresh, GenerationRequest(prompt=prompt, max_tokens=12, mode="target")).tokens
        fresh.reset()
        rewound.append(got.stats.rewound)
    if not engine.target.context.cuts_anywhere:
        # Each keystroke after the first went back to a checkpoint on its own line, a few
        # tokens before it, not to the start.
        assert all(0 <= r <= 12 for r in rewound[3:7]), rewound
    else:
        assert not any(rewound)


@pytest.mark.parametrize("name", SYNTHETIC)
def test_an_edit_far_from_the_cursor_goes_back_at_most_the_checkpoint_spacing(request, name):
    """A 700-token document, then a token deleted at 520, far above the places
    checkpoint_lengths keeps for the cursor: the engine goes back to the checkpoint at
    512 (every CHECKPOINT_SPACING tokens), not to the start, and answers as a fresh
    engine does."""
    model = loaded(request, name)
    engine = Engine(model, None, n_ctx=1024, calibrate_s=0, exact=True)
    fresh = Engine(model, None, n_ctx=1024, calibrate_s=0, exact=True)
    text = prompt_of(model, 700)
    generate(engine, GenerationRequest(prompt=text, max_tokens=4, mode="target"))
    edited = text[:520] + text[521:]
    got = generate(engine, GenerationRequest(prompt=edited, max_tokens=12, mode="target"))
    assert got.tokens == generate(fresh, GenerationRequest(prompt=edited, max_tokens=12, mode="target")).tokens
    assert got.stats.rewound == 520 - 2 * CHECKPOINT_SPACING, got.stats


@pytest.mark.parametrize("name", SYNTHETIC)
def test_a_draft_model_goes_back_to_its_own_checkpoint_near_an_edit_and_keeps_none_for_a_rounds_tokens(request,
                                                                                                       name):
    """A recurrent target's draft is recurrent too. After a token deleted at 520 of 700,
    the draft catches up from its checkpoint at 512, not from the start, and drafts as a
    fresh draft does. The tokens a round accepted add no lasting checkpoint: the round
    keeps its own."""
    model = loaded(request, name)

    def draft_model(checkpoint_mb: float) -> ModelDrafter:  # one token a decode: batched numerics move near ties
        return ModelDrafter(KVSequence(LlamaContext(model, n_ctx=1024, single_token_eval=True), checkpoint_mb),
                            model.n_vocab)
    drafter, rng = draft_model(CacheOptions().checkpoint_mb), np.random.default_rng(0)
    text = prompt_of(model, 700)
    drafter.propose(text, 4, Sampling(), rng)
    edited = text[:520] + text[521:]
    evaluated = drafter.sequence.evaluated
    drafted = drafter.propose(edited, 4, Sampling(), rng).tokens
    assert drafted == draft_model(0).propose(edited, 4, Sampling(), rng).tokens
    # From 512 to the text's last token but one (the draft steps from that token), then 4 steps.
    assert drafter.sequence.evaluated - evaluated == len(edited) - 1 - 2 * CHECKPOINT_SPACING + 4
    lasting = set(drafter.sequence.checkpoints.lasting)
    drafter.sequence.truncate(len(edited) + 1)  # the target accepted one drafted token
    drafter.propose(edited + drafted[:3] + [0], 4, Sampling(), rng)
    assert drafter.sequence.checkpoints.lasting == lasting


def test_the_first_keystroke_in_a_fill_in_the_middle_prompt_goes_back_to_a_checkpoint_at_the_cursor(
        synthetic_models):
    """Before any keystroke has shown where edits go, the cursor has: just before the
    suffix token. A keystroke there evaluates from it, not from the prompt's start."""
    model = synthetic_models["granitehybrid"]  # starcoder's vocabulary: FIM tokens
    special, text = model.special, prompt_of(model, 400)

    def fim(prefix: list[int]) -> list[int]:
        return [special.fim_prefix, *prefix, special.fim_suffix, *text[150:250], special.fim_middle]
    engine = Engine(model, None, n_ctx=1024, calibrate_s=0, exact=True)
    generate(engine, GenerationRequest(prompt=fim(text[:150]), max_tokens=8, mode="target"))
    typed = generate(engine, GenerationRequest(prompt=fim(text[:150] + text[300:301]), max_tokens=8, mode="target"))
    assert typed.stats.rewound == 0
    fresh = Engine(model, None, n_ctx=1024, calibrate_s=0, exact=True)
    assert typed.tokens == generate(fresh, GenerationRequest(prompt=fim(text[:150] + text[300:301]), max_tokens=8,
                                                             mode="target")).tokens


def test_a_prompt_cancelled_mid_evaluation_leaves_a_state_the_next_request_can_use(model):
    engine = Engine(model, None, n_ctx=1024, calibrate_s=0, exact=True)
    prompt = prompt_of(model, 230)
    generate(engine, GenerationRequest(prompt=prompt[:100], max_tokens=8, mode="target"))
    cancel = threading.Event()
    pieces = 0
    extend = engine.target.extend

    def extend_then_cancel(tokens, *args, **kwargs):
        nonlocal pieces
        pieces += 1
        cancel.set()  # after the first piece
        return extend(tokens, *args, **kwargs)
    engine.target.extend = extend_then_cancel
    evaluate_in_pieces(engine.target, prompt[:50] + prompt[60:], PROMPT_PIECE, cancel)
    del engine.target.extend
    assert pieces == 1 and engine.target.consistent
    fresh = Engine(model, None, n_ctx=1024, calibrate_s=0, exact=True)
    edited = prompt[:50] + prompt[60:] + prompt[:20]
    request = GenerationRequest(prompt=edited, max_tokens=12, mode="target")
    assert generate(engine, request).tokens == generate(fresh, request).tokens


def fim_keystroke_decoder(model: LlamaModel):
    """A decoder whose target and draft are `model` (a recurrent draft beside a recurrent
    target), and a fill-in-the-middle prompt at a cursor, as a function of the prefix."""
    special, text = model.special, prompt_of(model, 1200)

    def fim(prefix: list[int]) -> list[int]:
        return [special.fim_prefix, *prefix, special.fim_suffix, *text[700:1000], special.fim_middle]
    # A flat verify curve and a nearly free draft (as on a GPU): the tuner drafts with the model.
    costs = CostModel(verify_ms={n: 10.0 for n in range(1, 65)}, draft_token_ms={"draft": 0.1}, smoothing=0.0)
    return LocalDecoder(Engine(model, model, n_ctx=2048, exact=True, costs=costs)), text, fim


def keystroke(decoder: LocalDecoder, prompt: list[int]) -> Decoded:
    return decoder.decode_prompt(Decode(document="a.py", language="python", prompt=prompt, prompt_length=len(prompt),
                                 max_tokens=8, draft_mode="draft"))


def test_a_keystroke_after_warming_a_document_goes_back_to_a_checkpoint_at_the_cursor_not_to_the_start(
        synthetic_models):
    """completer/warm (a document opened or made active) evaluates the prompt ahead, in
    pieces: it keeps the checkpoints a request's evaluation would, so that the first
    keystroke at the cursor goes back to one there, in the target and in the draft."""
    model = synthetic_models["granitehybrid"]  # starcoder's vocabulary: FIM tokens
    decoder, text, fim = fim_keystroke_decoder(model)
    engine, prompt = decoder.engine, fim(text[:600])

    def prompt_for() -> list[int]:
        decoder.enter("a.py", None, None, None)
        return prompt
    assert decoder.warm_prompt("a.py", prompt_for) == len(prompt) - 1
    draft_evaluated = engine.drafter.sequence.evaluated
    typed = keystroke(decoder, fim(text[:600] + text[1100:1101]))
    assert typed.result.stats.rewound == 0, f"the target went back {typed.result.stats.rewound} tokens"
    # From the cursor: the 300 tokens of the suffix and the draft's steps, not the 900 of the prompt.
    assert typed.result.stats.drafted > 0
    assert engine.drafter.sequence.evaluated - draft_evaluated < 600, "the draft went back to the start"


def test_checkpoints_of_target_and_draft_share_one_budget_that_a_lowered_option_frees_at_once(synthetic_models):
    """cache.checkpoint_mb is the live document's: its target's and draft's checkpoints
    together stay within it, and configuring a smaller one (didChangeConfiguration)
    frees what is over it at once, 0 everything."""
    model = synthetic_models["granitehybrid"]
    context = LlamaContext(model, n_ctx=256)
    context.eval(prompt_of(model, 8), 0)
    state_mb = len(context.checkpoint()) / 2**20
    decoder, text, fim = fim_keystroke_decoder(model)
    engine = decoder.engine

    def held() -> list[int]:
        return [sequence.checkpoints.nbytes for sequence in engine.sequences]

    def budget(checkpoint_mb: float) -> None:
        decoder.configure(replace(Config(), cache=CacheOptions(checkpoint_mb=checkpoint_mb)))
    budget(5.5 * state_mb)
    keystroke(decoder, fim(text[:600]))
    keystroke(decoder, fim(text[:600] + text[1100:1101]))
    assert all(held()) and sum(held()) <= 5.5 * state_mb * 2**20, f"held {held()} of {state_mb * 2**20:.0f} each"
    budget(2 * state_mb)
    assert 0 < sum(held()) <= 2 * state_mb * 2**20, held()
    budget(0)
    assert held() == [0, 0]
    keystroke(decoder, fim(text[:600] + text[1100:1102]))
    assert held() == [0, 0]

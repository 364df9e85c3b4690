"""The draft model's catch-up on text it has not seen (after a paste, thousands of
tokens) goes in pieces with the request's cancel flag checked between them, as the
target's prefill does, and drafting after it stays plain decoding at temperature 0."""

import sysconfig
import threading
from pathlib import Path

import numpy as np
import pytest

from completer.decoders.local import LocalDecoder
from completer.decoders.decoder import Decode
from completer.engine.drafts import CATCH_UP_PIECE, ModelDrafter
from completer.engine.generation import Engine, GenerationRequest, generate
from completer.engine.kv import KVSequence
from completer.engine.speculative import Sampling
from completer.engine.tuning import CostModel
from completer.models.llama import LlamaContext
from completer.requests import CancelFlag, StopReason

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def long_prompt(model, tokens: int = 1500) -> list[int]:
    """`tokens` tokens of real code: a paste."""
    return model.tokenize((STDLIB / "textwrap.py").read_text())[:tokens]


def cancel_after_first_piece(sequence: KVSequence, cancel: threading.Event, monkeypatch) -> list[int]:
    """Set `cancel` once, when `sequence` has evaluated its first batch of more than one
    token (a catch-up's piece, not a draft step); returns the sizes of its batches."""
    batches: list[int] = []
    extend = sequence.extend

    def extend_then_cancel(tokens, *args, **kwargs):
        result = extend(tokens, *args, **kwargs)
        if len(tokens) > 1 and not any(size > 1 for size in batches):
            cancel.set()
        batches.append(len(tokens))
        return result

    monkeypatch.setattr(sequence, "extend", extend_then_cancel)
    return batches


def test_a_cancel_set_while_the_draft_catches_up_stops_it_within_one_piece(target, draft, monkeypatch):
    drafter = ModelDrafter(KVSequence(LlamaContext(draft, n_ctx=2048)), target.n_vocab)
    prompt = long_prompt(target)
    cancel = threading.Event()
    batches = cancel_after_first_piece(drafter.sequence, cancel, monkeypatch)
    proposal = drafter.propose(prompt, 4, Sampling(), np.random.default_rng(0), cancel)
    assert batches == [CATCH_UP_PIECE], f"evaluated {sum(batches)} of the prompt's {len(prompt)} tokens"
    assert proposal.tokens == [] and drafter.sequence.tokens == prompt[:CATCH_UP_PIECE]
    # The next request goes on from what went in.
    cancel.clear()
    assert len(drafter.propose(prompt, 4, Sampling(), np.random.default_rng(0), cancel).tokens) == 4
    assert max(batches) == CATCH_UP_PIECE and drafter.sequence.tokens[: len(prompt) - 1] == prompt[:-1]


def test_a_draft_whose_kv_lost_what_its_list_holds_starts_over_and_drafts_as_a_fresh_one(target, draft):
    """The catch-up goes back with KVSequence.rewind, not sync: the check that the KV
    holds what the token list says must be there too."""
    prompt = long_prompt(target, 300)
    drafter = ModelDrafter(KVSequence(LlamaContext(draft, n_ctx=2048)), target.n_vocab)
    drafter.propose(prompt[:200], 4, Sampling(), np.random.default_rng(0))
    drafter.sequence.context.truncate(50)  # llama.cpp lost tokens that the list still holds
    proposal = drafter.propose(prompt, 4, Sampling(), np.random.default_rng(0))
    fresh = ModelDrafter(KVSequence(LlamaContext(draft, n_ctx=2048)), target.n_vocab)
    assert proposal.tokens == fresh.propose(prompt, 4, Sampling(), np.random.default_rng(0)).tokens
    assert drafter.sequence.consistent


@pytest.mark.slow  # seconds of real model passes
def test_a_request_cancelled_while_the_draft_catches_up_after_a_paste_ends_there(target, draft, monkeypatch):
    """The target already holds the pasted text (its prefill is cancellable, and was
    done); the draft model's catch-up is what a keystroke would wait for."""
    # A flat verify curve and a nearly free draft (as on a GPU): the tuner drafts with the model.
    costs = CostModel(verify_ms={n: 10.0 for n in range(1, 65)}, draft_token_ms={"draft": 0.1}, smoothing=0.0)
    decoder = LocalDecoder(Engine(target, draft, n_ctx=2048, costs=costs))
    engine = decoder.engine
    prompt = long_prompt(target)
    engine.target.sync(prompt[:-1])
    cancel = CancelFlag()
    batches = cancel_after_first_piece(engine.drafter.sequence, cancel, monkeypatch)
    proposed = []
    propose = engine.drafter.propose
    monkeypatch.setattr(engine.drafter, "propose", lambda *args: proposed.append(propose(*args)) or proposed[-1])
    decoded = decoder.decode_prompt(Decode(document="a.py", language="python", prompt=prompt, prompt_length=len(prompt),
                                    max_tokens=16, draft_mode="draft", cancel=cancel))
    assert proposed, "the tuner chose no draft round: nothing was checked"
    assert decoded.stop_reason == StopReason.CANCELLED
    assert sum(batches) <= CATCH_UP_PIECE, f"the draft evaluated {sum(batches)} tokens: the cancel did not stop it"


@pytest.mark.slow  # seconds of real model passes
def test_greedy_drafting_after_a_catch_up_in_pieces_and_after_a_cancelled_one_is_plain_decoding(
        target, draft, monkeypatch):
    engine = Engine(target, draft, n_ctx=1024, calibrate_s=0, exact=True)
    prompt = long_prompt(target, 2 * CATCH_UP_PIECE + 17)
    draft_length = 4
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=16, mode="target")).tokens
    engine.drafter.sequence.truncate(0)
    assert generate(engine, GenerationRequest(prompt=prompt, max_tokens=16, mode="draft",
                                              draft_length=draft_length)).tokens == plain
    # A catch-up cancelled after its first piece, then a request that goes on from it.
    engine.drafter.sequence.truncate(0)
    cancel = threading.Event()
    with monkeypatch.context() as patch:
        cancel_after_first_piece(engine.drafter.sequence, cancel, patch)
        engine.drafter.propose(prompt, draft_length, Sampling(), np.random.default_rng(0), cancel)
    assert len(engine.drafter.sequence.tokens) == CATCH_UP_PIECE
    fast = generate(engine, GenerationRequest(prompt=prompt, max_tokens=16, mode="draft", draft_length=draft_length))
    assert fast.tokens == plain and fast.stats.drafted > 0

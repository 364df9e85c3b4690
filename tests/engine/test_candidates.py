"""Several candidates: where they part from the completion, that each is the target's
greedy text after its first token, and that the completion's cache is left as it was."""

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from completer.engine.candidates import MAX_GAP, branch_points, candidates
from completer.engine.generation import Engine, GenerationRequest, generate
from completer.engine.speculative import NEAR_TIE_LOGITS, parting_gap
from test_speculative_engine import stdlib_holes

pytestmark = pytest.mark.slow  # minutes of real model passes: the full suite's, not the fast tier's


def test_branches_part_where_the_runner_up_came_closest():
    logits = np.zeros((5, 6), np.float32)
    chosen = [0, 1, 2, 3, 4]
    for row, (token, gap) in enumerate([(5, 2.0), (4, 0.5), (3, MAX_GAP + 0.1), (2, 0.5), (1, 1.0)]):
        logits[row, chosen[row]] = 10.0
        logits[row, token] = 10.0 - gap
    assert branch_points(logits, chosen, 2) == [(1, 4), (3, 2)]  # the two closest; a tie is no reason to skip
    assert branch_points(logits, chosen, 3) == [(1, 4), (3, 2), (4, 1)]
    assert branch_points(logits, chosen, 9) == [(0, 5), (1, 4), (3, 2), (4, 1)]  # never past MAX_GAP
    assert branch_points(logits, chosen, 0) == []


@given(st.lists(st.lists(st.floats(-30, 30, width=32), min_size=4, max_size=4), min_size=1, max_size=8),
       st.integers(0, 5))
def test_a_branch_point_is_another_token_than_the_chosen_one(rows, count):
    logits = np.array(rows, np.float32)
    chosen = [int(np.argmax(row)) for row in logits]
    points = branch_points(logits, chosen, count)
    assert len(points) <= count and [p for p, _ in points] == sorted({p for p, _ in points})
    for position, token in points:
        assert token != chosen[position]
        assert logits[position, chosen[position]] - logits[position, token] <= MAX_GAP


@pytest.fixture(scope="module")
def exact(target, draft):
    """Single-token verification: a candidate's tokens come from plain steps' numerics."""
    return Engine(target, draft, n_ctx=2048, calibrate_s=0, exact=True)


@pytest.mark.parametrize("mode", ["target", "auto"])
def test_each_candidate_is_greedy_after_its_first_token(exact, target, mode):
    """Plain decoding from the prompt, the completion's tokens before the candidate's
    point and the candidate's first token gives the candidate's other tokens (a
    branch's cells lie elsewhere in llama.cpp's pool than plain decoding's, so a near
    tie may flip, judged as speculation's are)."""
    made = 0
    for hole in stdlib_holes(4, prompt_chars=600):
        prompt = target.tokenize(hole)
        main = generate(exact, GenerationRequest(prompt=prompt, max_tokens=24, mode=mode, keep_logits=True))
        for candidate in candidates(exact, GenerationRequest(prompt=prompt, max_tokens=24), main, 3):
            made += 1
            point = candidate.position
            assert candidate.tokens[:point] == main.tokens[:point]
            assert candidate.tokens[point : point + 1] != main.tokens[point : point + 1]
            assert candidate.text == target.detokenize(candidate.tokens)
            if len(candidate.tokens) == point:
                assert candidate.stop_reason == "end"  # the runner-up there was an end of generation
                continue
            start = prompt + candidate.tokens[: point + 1]
            plain = generate(exact, GenerationRequest(prompt=start, max_tokens=24 - point - 1, mode="target",
                                                      keep_logits=True))
            rest = candidate.tokens[point + 1:]
            # Cut where the completion ended ("time"): a start of plain decoding's text.
            plain_part = plain.tokens[: len(rest)] if candidate.stop_reason == "time" else plain.tokens
            if plain_part != rest:
                gap = parting_gap(plain.logits, np.array(rest))
                assert gap is not None and gap < NEAR_TIE_LOGITS, f"parted where plain preferred its token by {gap}"
    assert made >= 4  # smol has close runners-up in these holes


def test_the_completions_cache_is_left_as_it_was(exact, target):
    prompt = target.tokenize(stdlib_holes(1, prompt_chars=600)[0])
    main = generate(exact, GenerationRequest(prompt=prompt, max_tokens=16, mode="target", keep_logits=True))
    held = list(exact.target.tokens)
    assert candidates(exact, GenerationRequest(prompt=prompt, max_tokens=16), main, 2)
    assert exact.target.tokens == held and exact.target.consistent
    assert exact.target.context.length() == len(held)  # the branches' cells are gone: none is counted as the text's
    again = generate(exact, GenerationRequest(prompt=prompt, max_tokens=16, mode="target"))
    assert again.tokens == main.tokens


def test_candidates_stop_as_the_completion_does(exact, target):
    """The same stop strings and limit: no candidate holds a stop string or runs past max_tokens."""
    for hole in stdlib_holes(3, prompt_chars=600):
        prompt = target.tokenize(hole)
        main = generate(exact, GenerationRequest(prompt=prompt, max_tokens=20, stop=("\n",), mode="target",
                                                 keep_logits=True))
        for candidate in candidates(exact, GenerationRequest(prompt=prompt, max_tokens=20, stop=("\n",)), main, 3):
            assert "\n" not in candidate.text and len(candidate.tokens) <= 20
            # No longer than the completion, with its end token: a candidate costs no more than it.
            assert len(candidate.tokens) <= max(len(main.tokens) + (main.end_token is not None), candidate.position + 1)
            assert candidate.stop_reason in ("stop", "end", "max_tokens", "time")


def test_a_cancelled_request_gets_no_candidates(exact, target):
    prompt = target.tokenize(stdlib_holes(1, prompt_chars=600)[0])
    main = generate(exact, GenerationRequest(prompt=prompt, max_tokens=16, mode="target", keep_logits=True))
    cancel = threading.Event()
    cancel.set()
    assert candidates(exact, GenerationRequest(prompt=prompt, max_tokens=16, cancel=cancel), main, 3) == []

"""The client's back-off on a shared server (completer/editor/load.py): while the server
is saturated the debounce grows with the answers' latency and prefetch waits, and the
local engine is never judged."""

from dataclasses import replace

import pytest

from completer.config import Config, GenerationOptions, LanguageServerOptions
from completer.editor.completer import Completer
from completer.editor.load import DEBOUNCE_MOST_MS, PACE_MIN_COUNT, WINDOW, LoadGauge
from completer.requests import CompletionRequest, Source
from fake_decoder import FakeDecoder

TEXT = "def mean(values):\n    "
BODY = "return sum(values) / len(values)"
NEXT = "\n\n\ndef median(values):\n    return sorted(values)[len(values) // 2]\n"


def test_the_debounce_is_the_configured_one_until_the_server_is_saturated_and_then_half_the_median_latency():
    gauge = LoadGauge()
    assert gauge.debounce_ms(150) == 150
    for latency in (100, 200, 300, 400):
        gauge.answered(latency, 10, 50)  # 5 ms a token each: slow answers at the server's own speed
    assert not gauge.saturated and gauge.debounce_ms(50) == 50  # a server with room: waiting only delays
    for _ in range(WINDOW):
        gauge.answered(200, 10, 100)  # 10 ms a token: half the speed alone
    assert gauge.saturated
    assert gauge.debounce_ms(50) == 100  # half the median, 200 ms
    assert gauge.debounce_ms(150) == 150  # never below what the user set
    for _ in range(WINDOW):
        gauge.answered(10_000, 10, 100)
    assert gauge.debounce_ms(0) == DEBOUNCE_MOST_MS
    for _ in range(WINDOW):  # the load went: only the last WINDOW answers count
        gauge.answered(40, 10, 50)
    assert gauge.debounce_ms(0) == 0


def test_saturated_when_the_recent_median_pace_is_twice_the_fastest_seen():
    gauge = LoadGauge()
    for _ in range(PACE_MIN_COUNT):
        gauge.answered(100, 20, 200)  # 10 ms a token, alone
    assert not gauge.saturated
    for _ in range(WINDOW // 2):
        gauge.answered(100, 20, 390)  # 19.5 ms: slower, not twice
    assert not gauge.saturated
    for _ in range(WINDOW):
        gauge.answered(100, 20, 400)  # 20 ms: twice
    assert gauge.saturated
    for _ in range(WINDOW // 2 + 1):
        gauge.answered(100, 20, 200)  # the others went: the median is back
    assert not gauge.saturated


def test_short_answers_and_too_few_answers_say_nothing_of_the_pace():
    gauge = LoadGauge()
    gauge.answered(100, 20, 100)
    for _ in range(PACE_MIN_COUNT):
        gauge.answered(100, 3, 3_000)  # 3 tokens: the prompt's time more than the load's
    assert not gauge.saturated
    for _ in range(PACE_MIN_COUNT - 2):
        gauge.answered(100, 20, 1_000)
    assert not gauge.saturated  # one pace alone, then too few slow ones to judge by
    gauge.answered(100, 20, 1_000)
    assert gauge.saturated


def completer_on(shared: bool) -> tuple[Completer, FakeDecoder]:
    decoder = FakeDecoder({"\n    ": BODY, BODY: NEXT}, shared=shared)
    config = Config(generation=GenerationOptions(time_budget_ms=0), lsp=LanguageServerOptions(debounce_ms=0))
    return Completer(decoder, config), decoder


def at_end(text: str) -> CompletionRequest:
    return CompletionRequest("m.py", "m.py", text, len(text), "python")


def answer_at_pace(completer: Completer, decoder: FakeDecoder, pace_ms: float, times: int) -> None:
    decoder.pace_ms = pace_ms
    for i in range(times):
        assert completer.complete(at_end(TEXT + "#" * i + "\n    ")).source == Source.MODEL


@pytest.mark.parametrize("shared", [True, False])
def test_prefetch_waits_while_a_shared_server_is_saturated_and_the_local_engine_is_never_judged(shared):
    completer, decoder = completer_on(shared)
    answer_at_pace(completer, decoder, 1.0, PACE_MIN_COUNT)
    answer_at_pace(completer, decoder, 5.0, WINDOW)
    assert completer.stats().saturated == shared
    assert completer.complete(at_end(TEXT)).text == BODY
    ahead = completer.prefetch(at_end(TEXT + BODY), len(TEXT))
    assert (ahead is None) == shared
    answer_at_pace(completer, decoder, 1.0, WINDOW)  # the load went
    assert not completer.stats().saturated
    assert completer.complete(at_end(TEXT)).text == BODY
    assert completer.prefetch(at_end(TEXT + BODY), len(TEXT)) is not None or not shared


def test_a_prefetch_does_not_count_as_an_answer_of_the_users():
    completer, decoder = completer_on(True)
    answer_at_pace(completer, decoder, 1.0, PACE_MIN_COUNT)
    for i in range(WINDOW):
        text = TEXT + "#" * i + "\n    "
        decoder.pace_ms = 2.5
        completer.complete(at_end(text))
        decoder.pace_ms = 1.0  # were the prefetches counted, the median would stay under 2x
        completer.prefetch(at_end(text + BODY), len(text))
    assert completer.stats().saturated


def test_without_back_off_the_debounce_is_the_configured_one_and_prefetch_runs_under_load():
    completer, decoder = completer_on(True)
    completer.configure(replace(completer.config, lsp=LanguageServerOptions(debounce_ms=30, back_off=False)))
    answer_at_pace(completer, decoder, 1.0, PACE_MIN_COUNT)
    answer_at_pace(completer, decoder, 5.0, WINDOW)
    assert completer.stats().saturated and completer.debounce_ms() == 30
    assert completer.complete(at_end(TEXT)).text == BODY
    assert completer.prefetch(at_end(TEXT + BODY), len(TEXT)) is not None
    completer.configure(replace(completer.config, lsp=LanguageServerOptions(debounce_ms=0)))
    assert completer.debounce_ms() > 0  # back_off's default, saturated: half the fake's answers' latency

"""What the client makes of an OpenAI-compatible stream that carries no timings of its own
(vLLM's: the text events, the finish, then the usage with no choices): the counts from
the usage, the time from the stream as it came."""

import time

import pytest

from completer.decoders.clients import OpenAIClient
from scripted_server import ScriptedServer


@pytest.fixture
def paced():
    server = ScriptedServer()
    server.answer, server.ends, server.pace_s = "abcdefghijkl", True, 0.1  # 4 events of 3 characters
    yield server
    server.stop()


def test_a_stream_without_timings_is_timed_as_it_came_and_counted_from_its_usage(paced):
    """The server waits 100 ms after each event: three waits lie between the four text
    events (generation), three after the last of them (the finish and the usage events,
    then the end), which are not generation. Bounds only from those waits, which a busy
    machine can lengthen but not shorten."""
    start = time.monotonic()
    generation = OpenAIClient(paced.url).complete("scripted", "def f(", 16)
    elapsed_ms = (time.monotonic() - start) * 1000
    timings = generation.timings
    assert generation.text == "abcdefghijkl"
    assert (generation.tokens_evaluated, timings["prompt_n"], timings["predicted_n"]) == (10, 10, 4)
    assert timings["predicted_ms"] >= 295
    assert elapsed_ms - timings["prompt_ms"] - timings["predicted_ms"] >= 295
    assert timings["predicted_per_second"] == pytest.approx(3000 / timings["predicted_ms"])


def test_a_servers_own_timings_are_kept():
    """llama-server's /v1/completions ends with its own timings: those, not ours."""
    server = ScriptedServer()
    try:
        server.answer, server.ends = "abc", True
        own = {"prompt_n": 3, "predicted_n": 1, "prompt_ms": 1.5, "predicted_ms": 2.5, "predicted_per_second": 400.0}
        server.extra = {"timings": own}
        assert OpenAIClient(server.url).complete("scripted", "def f(", 16).timings == own
    finally:
        server.stop()

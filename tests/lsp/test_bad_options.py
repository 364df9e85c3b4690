"""Options no editor should send, sent to the real server over stdio: every option at
its extremes (0, negative, huge, NaN and infinities as Python's json reads them, wrong
types, long strings, unknown keys, nested garbage) as a settings change, each followed
by an inline completion. The server answers every request within a bound, says in a
window message which option it did not take, and never hangs or dies.

One server serves the whole suite. The models group is left out of the generated
options: any change there loads the models again (and its machine-level options are
refused over LSP anyway), so it is tested by name below. A draft mode entering or
leaving `target` reloads too, so `target` is never generated."""

import math
import queue
import time
from dataclasses import asdict, fields
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from completer.config import RANGES, RENAMED, Config, config_from_dict
from completer.loading import needs_reload
from completer.lsp import protocol
from completer.lsp.server import refused_message, without_machine_options
from raw_lsp import RawServer

ANSWER_S = 30  # every request is answered within this, or the options asked for a longer generation
CANCELLED_S = 10  # such a generation, cancelled, answers within this
START = {"models": {"preset": "smol"}, "generation": {"max_tokens": 16, "time_budget_ms": 2000}}
# Every option the examples may change, at its default (the start's generation), sent
# before each example: examples do not build on each other, and the test knows what the
# server holds.
RESET = {group: values for group, values in asdict(config_from_dict(START)[0]).items() if group != "models"}
TEXT = "def mean(values):\n    return "
URI = "file:///project/hostile_options.py"


class Server(RawServer):
    """RawServer, keeping the window messages that arrive before each response."""

    def answer(self, id_: Any, method: str, params: Any, timeout: float) -> tuple[dict | None, list[str]]:
        self.send({"id": id_, "method": method, "params": params})
        return self.until_response(id_, timeout)

    def until_response(self, id_: Any, timeout: float) -> tuple[dict | None, list[str]]:
        """(the response, or None after `timeout`; the window/showMessage texts before it)."""
        shown, deadline = [], time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = self.messages.get(timeout=left)
            except queue.Empty:
                break
            if message.get("method") == "window/showMessage":
                shown.append(message["params"]["message"])
            elif "method" not in message and message.get("id") == id_:
                return message, shown
        return None, shown

    def configure(self, options: Any) -> None:
        self.send({"method": "workspace/didChangeConfiguration", "params": {"settings": options}})


@pytest.fixture(scope="module")
def server(smol, smol_cache):
    """The one server of the module, started with START, its models loaded, URI open in it."""
    raw = Server({"COMPLETER_CACHE_DIR": str(smol_cache)})
    raw.initialize(START)
    assert raw.wait_ready()["ready"]
    raw.send({"method": "textDocument/didOpen",
              "params": {"textDocument": {"uri": URI, "languageId": "python", "version": 1, "text": TEXT}}})
    raw.ids = iter(range(100, 10**9))
    yield raw
    raw.close()


def new_text(server: Server) -> str:
    """The document's text changed, so that the forward cache cannot answer: the model must."""
    server.version = getattr(server, "version", 1) + 1
    text = f"# {server.version}\n{TEXT}"
    server.send({"method": "textDocument/didChange", "params": {
        "textDocument": {"uri": URI, "version": server.version}, "contentChanges": [{"text": text}]}})
    return text


def completion_at_end(server: Server, uri: str, text: str, timeout: float = ANSWER_S):
    line, character = text.count("\n"), len(text.split("\n")[-1])
    id_ = next(server.ids)
    return id_, *server.answer(id_, "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 1}}, timeout)


def around(low: float, high: float) -> list[float]:
    """A range's ends and what lies just outside them."""
    step = 1 if float(low).is_integer() and float(high).is_integer() else 1e-6
    return [low - step, low, high, high + step]


EXTREMES = st.sampled_from([0, -1, 1, 2**31 - 1, 2**31, 2**63, 10**30, -(10**30), 10**400, 0.5, -0.0, 1e-300,
                            5e-324, 1e300, math.nan, math.inf, -math.inf, True, False, None, "", "auto",
                            "x" * 100_000, [], {}, [1, [2, [3]]], {"a": {"b": {"c": None}}}])
BOUNDS = st.sampled_from(sorted({value for low, high in RANGES.values() for value in around(low, high)}))
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=6)
DRAFT_MODES = st.sampled_from(["auto", "ngram", "draft", "hybrid", "Target", "psychic"])
VALUES = EXTREMES | BOUNDS | JSON


def option_values(group: str, key: str) -> st.SearchStrategy:
    return DRAFT_MODES if (group, key) == ("generation", "draft_mode") else VALUES


OPTIONS = [(group.name, item.name) for group in fields(Config) if group.name != "models"
           for item in fields(group.default_factory)] + [
    tuple(old.split(".")) for old in RENAMED if not old.startswith("models.")]
ONE_GROUP = st.sampled_from(OPTIONS).flatmap(lambda option: st.tuples(st.just(option), option_values(*option)))
# Known options at extreme values, with now and then an unknown one or a whole group of garbage.
SETTINGS = st.lists(ONE_GROUP, max_size=8).map(
    lambda chosen: {group: {key: value for (g, key), value in chosen if g == group} for (group, _), _ in chosen})
HOSTILE = (SETTINGS | st.dictionaries(st.sampled_from(["generation", "prompt", "colour", "completer"]), JSON,
                                      max_size=2) | JSON)


def settled_config(options: Any) -> tuple[Config, list[str]]:
    """What the server holds after RESET then `options`, and the problems it should name,
    as its didChangeConfiguration reads them (the `completer` section unwrapped)."""
    base = config_from_dict(RESET, config_from_dict(START)[0])[0]
    if isinstance(options, dict) and protocol.SETTINGS_SECTION in options:
        options = options[protocol.SETTINGS_SECTION]
    options, refused = without_machine_options(options, base)  # refused first, whatever their values
    config, problems = config_from_dict(options, base)
    assert not needs_reload(base, config), "the strategy must not reload the models"
    return config, [refused_message(name) for name in refused] + problems


@pytest.mark.slow  # a request for every option at each extreme
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(options=HOSTILE)
def test_every_option_at_its_extremes_gets_an_answer_or_a_message_naming_it(server, options):
    config, problems = settled_config(options)
    server.configure(RESET)
    server.configure(options)  # json.dumps writes NaN and Infinity, which the server's json reads
    id_, response, shown = completion_at_end(server, URI, new_text(server))
    if response is None:
        # Only options that allow a generation this long may take it; cancelled, it ends at once.
        assert config.generation.time_budget_ms == 0 or config.generation.time_budget_ms > ANSWER_S * 1000, \
            f"no answer within {ANSWER_S} s"
        server.send({"method": "$/cancelRequest", "params": {"id": id_}})
        response, more = server.until_response(id_, CANCELLED_S)
        shown += more
        assert response is not None, f"no answer within {CANCELLED_S} s of the cancel"
    assert "result" in response or response["error"]["code"] == -32800, response  # -32800: cancelled
    for problem in problems:
        assert f"completer: {problem}" in shown, (problem, shown)
    assert server.process.poll() is None
    stats = server.request(next(server.ids), protocol.STATS, timeout=ANSWER_S)["result"]
    assert stats["ready"] and not stats["error"]


def test_max_tokens_the_context_cannot_hold_get_a_message_naming_both_and_answers_go_on(server):
    """generation.max_tokens 4096 in the default 4096-token context leaves no room for a
    prompt, and fitting one into none would loop forever."""
    server.configure(RESET)
    server.configure({"generation": {"max_tokens": 4096}})
    _, response, shown = completion_at_end(server, URI, new_text(server))
    assert response is not None and response["result"] is not None, "no completion"
    assert response["result"]["items"][0]["insertText"]
    assert any("generation.max_tokens 4096 leaves 0 tokens of models.context_tokens 4096 for the prompt" in message
               and message.endswith("keeping generation.max_tokens 16") for message in shown), shown


def test_a_context_too_small_for_the_answer_is_kept_as_it_was_without_a_reload(server):
    server.configure(RESET)
    server.configure({"models": {"context_tokens": 200}})
    _, response, shown = completion_at_end(server, URI, new_text(server))
    assert response is not None and response["result"]["items"][0]["insertText"]
    assert "completer: models.context_tokens = 200 is not a whole number from 258 to 131072: keeping 4096" in shown
    assert server.request(next(server.ids), protocol.STATS)["result"]["ready"]  # no reload began


def test_a_document_whose_path_alone_overflows_the_context_gets_no_answer_and_a_reason(server):
    """No option is wrong here, yet no prompt fits: a path of 20,000 digits is more tokens
    than the context has. The request is answered empty with a message, and the next one
    for another document is answered as before."""
    server.configure(RESET)
    uri = "file:///" + "/".join(["0123456789" * 20] * 100) + ".py"
    server.send({"method": "textDocument/didOpen",
                 "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": TEXT}}})
    _, response, shown = completion_at_end(server, uri, TEXT)
    assert response is not None and response["result"] is None
    assert any(message.startswith("completer: no completion: the smallest prompt takes") and
               "models.context_tokens 4096 less generation.max_tokens 16" in message for message in shown), shown
    _, response, _ = completion_at_end(server, URI, new_text(server))
    assert response is not None and response["result"]["items"][0]["insertText"]

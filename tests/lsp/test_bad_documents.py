"""Documents no editor should send, sent to the real server: a 20 MB file, a 1 MB line,
binary bytes and deeply nested code each get a completion or an empty answer, in
bounded time and memory, and the server goes on serving."""

import random
import time

import pytest

from raw_lsp import RawServer

pytestmark = pytest.mark.slow  # a 20 MB file, a 1 MB line and more, each through the real server


def resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def lines_of_code(n: int) -> str:
    body = ["def area(width, height):", "    return width * height", "", "", "class Box:",
            "    def __init__(self, size):", "        self.size = size", ""]
    return "\n".join(body[i % len(body)] for i in range(n))


def binary(n: int) -> str:
    rng = random.Random(0)
    return bytes(rng.randrange(256) for _ in range(n)).decode("latin-1")  # NULs and control characters too


HOSTILE = {
    "20 MB file": lines_of_code(1_400_000) + "\nresult = area(",
    "1 MB single line": "x = [" + "1, " * 350_000,
    "binary content": binary(200_000),
    "deeply nested code": "value = " + "[" * 50_000 + "1" + "]" * 49_999,
}


@pytest.fixture(scope="module")
def server(smol, smol_cache):
    """The one server of the module, its models loaded, and its resident memory then (baseline_mb)."""
    raw = RawServer({"COMPLETER_CACHE_DIR": str(smol_cache)})
    # 8 tokens bound the time; a 1 s budget on a loaded 2-core machine left no whole line
    raw.initialize({"models": {"preset": "smol"}, "generation": {"max_tokens": 8, "time_budget_ms": 0}})
    assert raw.wait_ready()["ready"]
    raw.baseline_mb = resident_mb(raw.process.pid)
    yield raw
    raw.close()


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_document_gets_an_answer_in_bounded_time_and_memory(server, name):
    text = HOSTILE[name]
    uri = f"file:///project/{name.replace(' ', '_')}.py"
    server.send({"method": "textDocument/didOpen",
                 "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}})
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    position = {"line": len(lines) - 1, "character": len(lines[-1].encode("utf-16-le")) // 2}
    started = time.monotonic()
    response = server.request(name, "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": position, "context": {"triggerKind": 1}}, timeout=120)
    elapsed = time.monotonic() - started
    assert "error" not in response, response
    result = response["result"]
    assert result is None or all(isinstance(item["insertText"], str) for item in result["items"])
    assert elapsed < 120, f"{name}: {elapsed:.1f} s"  # bounded, with room for a loaded CI machine
    server.send({"method": "textDocument/didClose", "params": {"textDocument": {"uri": uri}}})
    # Memory: the document's text held a few times over at most, and given back on close.
    stats = server.request(f"{name} stats", "completer/stats")["result"]
    assert stats["ready"] and stats["requests"] >= 1
    assert resident_mb(server.process.pid) - server.baseline_mb < 400


def test_the_server_still_completes_after_the_hostile_documents(server):
    uri = "file:///project/plain.py"
    text = "def mean(values):\n    return sum(values) / len("
    server.send({"method": "textDocument/didOpen",
                 "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}})
    response = server.request("plain", "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": 1, "character": len("    return sum(values) / len(")},
        "context": {"triggerKind": 1}})
    assert response["result"]["items"][0]["insertText"].startswith("values")

"""Killing the server (SIGKILL: no cleanup runs) mid-write and mid-generation leaves the
cache directory valid, and the next start is clean."""

import time
from pathlib import Path

import pytest

from completer.models.gguf_file import check_gguf
from raw_lsp import RawServer

OPTIONS = {"models": {"preset": "smol"}, "generation": {"max_tokens": 64}}


def start(cache: Path) -> RawServer:
    server = RawServer({"COMPLETER_CACHE_DIR": str(cache)})
    server.initialize(OPTIONS)
    return server


def assert_cache_valid(cache: Path) -> None:
    """Every model file in the cache is a whole GGUF file; no partial file is left."""
    assert not list(cache.rglob("*.part"))
    for path in cache.rglob("*.gguf"):
        check_gguf(path)


@pytest.mark.slow  # processes started and killed mid-way
def test_a_kill_while_the_models_are_converted_leaves_a_cache_the_next_start_cleans(tmp_path):
    cache = tmp_path / "cache"
    server = start(cache)  # an empty cache: the packaged target is converted, the draft cut
    deadline = time.monotonic() + 120
    while not list(cache.rglob("*.part")):
        assert time.monotonic() < deadline, "no conversion was seen to start"
        time.sleep(0.02)
    server.process.kill()
    server.close()
    assert not [p for p in cache.rglob("*.gguf")]  # nothing half-written under a model's name

    again = start(cache)
    stats = again.wait_ready()
    assert stats["ready"] and not stats["error"], stats
    again.close()
    assert_cache_valid(cache)


@pytest.mark.slow  # processes started and killed mid-way
def test_a_kill_mid_generation_leaves_the_cache_valid_and_the_next_start_completes(smol, smol_cache, tmp_path):
    server = start(smol_cache)
    assert server.wait_ready()["ready"]
    uri = "file:///project/mean.py"
    server.send({"method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": "def mean(values):\n    return sum("}}})
    server.send({"id": "mid", "method": "textDocument/inlineCompletion", "params": {
        "textDocument": {"uri": uri}, "position": {"line": 1, "character": 15}, "context": {"triggerKind": 1}}})
    time.sleep(0.05)  # generating now: 64 tokens take well over this
    server.process.kill()
    server.close()
    assert_cache_valid(smol_cache)

    again = start(smol_cache)
    assert again.wait_ready()["ready"]
    again.send({"method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": "def mean(values):\n    return sum("}}})
    answer = again.request("after", "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": 1, "character": 15}, "context": {"triggerKind": 1}})
    assert answer["result"]["items"][0]["insertText"].startswith("values")
    again.close()

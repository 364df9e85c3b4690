"""llama-server as bench's peer: built from llama-cpp-python's own llama.cpp source,
found, run beside our modes on the same holes, and reported as failed (with why) when
it cannot start or dies, while the run goes on."""

import json
import os
import subprocess
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest

from completer.bench import LLAMA_SERVER, LLAMA_SERVER_PEERS
from completer.bench import report as bench_report
from completer.bench.holes import pick_holes
from completer.bench.peers import LlamaServer
from completer.bench.run import Bench, Settings
from completer.config import Config, GenerationOptions
from completer.loading import Pair
from completer.models import llama_build
from completer.models.llama import LlamaContext, LlamaModel
from completer.models.llama_build import PROGRAMS, SERVER_ENV, LlamaBuildError, find
from conftest import REPO, run_completer

FOUR_TOKENS = Config(generation=GenerationOptions(max_tokens=4))


def test_the_source_is_downloaded_once_and_a_dead_download_is_swept(monkeypatch, tmp_path):
    """make demo's compile and the bindings' install read one download of the sdist."""
    monkeypatch.setenv("COMPLETER_CACHE_DIR", str(tmp_path))
    pin = llama_build.pinned_version()
    assert pin == version("llama_cpp_python")  # the bindings installed are the pinned ones
    downloads = []

    def pip_download(command, what, report=None):
        downloads.append(command)
        Path(command[command.index("-d") + 1], f"llama_cpp_python-{pin}.tar.gz").write_bytes(b"sdist")

    monkeypatch.setattr(llama_build, "_run", pip_download)
    dead = llama_build.builds_dir() / ".download.999999999"  # no process has that id
    dead.mkdir(parents=True)
    path = llama_build.fetch(lambda message: None)
    assert llama_build.fetch(lambda message: None) == path == llama_build.sdist_path()
    assert path.read_bytes() == b"sdist" and len(downloads) == 1 and not dead.exists()
    assert downloads[0][downloads[0].index("--no-binary") + 1] == "llama-cpp-python"  # its build tools as wheels
    assert sorted(p.name for p in llama_build.builds_dir().iterdir()) == [path.name]


def test_bindings_of_another_version_than_the_pin_are_not_linked_to_the_build(monkeypatch):
    monkeypatch.setattr(llama_build, "version", lambda name: "0.0.1")
    with pytest.raises(LlamaBuildError, match=f"llama-cpp-python 0.0.1 is installed, and completer pins "
                                              f"{llama_build.pinned_version()}"):
        llama_build.build(lambda message: None)


def test_llama_server_is_of_the_build_the_bindings_load_and_a_wrong_path_says_what_to_run(llama_server, monkeypatch,
                                                                                           tmp_path):
    """One compile: the library completer loads, llama-server and ggml-rpc-server come
    from one folder, and the programs link that folder's libllama."""
    import llama_cpp

    folder = llama_server.parent
    again = run_completer("build")
    assert again.returncode == 0 and again.stdout.strip() == f"cached: {folder}"
    assert Path(llama_cpp.llama_cpp._lib._name).resolve().parent == folder.resolve()
    for program in PROGRAMS:
        linked = subprocess.run(["ldd", str(folder / program)], capture_output=True, text=True, check=True).stdout
        assert f"{folder}/libllama.so" in linked or program == "ggml-rpc-server", linked
        assert f"{folder}/libggml-base.so" in linked, linked
    assert "version" in subprocess.run([llama_server, "--version"], capture_output=True, text=True).stderr
    monkeypatch.setenv("COMPLETER_CACHE_DIR", str(tmp_path / "empty"))
    assert find() == llama_server  # beside the library, whatever the cache
    assert find(llama_server) == llama_server
    with pytest.raises(LlamaBuildError, match="completer build"):
        find(tmp_path / "none")
    monkeypatch.setenv(SERVER_ENV, str(tmp_path))  # a folder, not a program
    with pytest.raises(LlamaBuildError, match=f"\\${SERVER_ENV}"):
        find()
    monkeypatch.delenv(SERVER_ENV)
    with monkeypatch.context() as bindings:
        bindings.setattr(llama_build, "bindings_lib", lambda: tmp_path / "lib")  # bindings of their own build
        assert find() is None
    doctor = json.loads(run_completer("doctor", "--json").stdout)
    assert doctor["llama-server"] == str(llama_server)
    assert doctor["llama.cpp build folder"] == str(folder)
    assert "-DBUILD_SHARED_LIBS=ON" in doctor["llama.cpp build flags"].split()


def test_every_llama_server_configuration_runs_beside_ours_with_the_same_greedy_output(llama_server, smol_cache,
                                                                                       tmp_path):
    out = tmp_path / "bench.json"
    result = run_completer("bench", str(REPO / "completer"), "--preset", "smol", "--n", "2", "--max-tokens", "8",
                           "--modes", ",".join(["auto", *LLAMA_SERVER_PEERS]), "--llama-server", str(llama_server),
                           "--report", str(out), "--json", "--profile",
                           env={"COMPLETER_CACHE_DIR": str(smol_cache)}, timeout=900)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)  # stdout holds the JSON alone
    summary = json.loads(out.read_text())["summary"]
    assert [row["mode"] for row in rows] == list(summary) == ["target", "auto", *LLAMA_SERVER_PEERS]
    for mode in LLAMA_SERVER_PEERS:
        entry = summary[mode]
        assert entry["failed"] is None and entry["holes"] == 2 and entry["tokens_per_s"] > 0, (mode, entry)
        assert entry["wall_tokens_per_s"] <= entry["tokens_per_s"]  # HTTP on top of the server's own time
        # Greedy, the same kernels: target's tokens, but for near ties where batched verification parts.
        assert entry["other_differences"] == 0, (mode, entry)
    assert summary[f"{LLAMA_SERVER}:draft"]["acceptance_rate"] is not None  # drafted, as its timings say
    assert "auto against the fastest llama-server" in result.stderr
    assert f"target against {LLAMA_SERVER}" in result.stderr
    assert "llama_decode" in result.stderr and summary["auto"]["decode_ms_per_pass"] > 0


@pytest.mark.slow  # a real bench
def test_a_peer_that_cannot_start_is_reported_with_its_reason_and_the_run_goes_on(smol_cache, tmp_path):
    broken = tmp_path / "llama-server"
    broken.write_text("#!/bin/sh\necho 'error: this llama-server cannot load the model' >&2\nexit 3\n")
    broken.chmod(0o755)
    out = tmp_path / "bench.json"
    result = run_completer("bench", str(REPO / "completer"), "--preset", "smol", "--n", "1", "--max-tokens", "4",
                           "--modes", f"ngram,{LLAMA_SERVER}", "--llama-server", str(broken), "--report", str(out),
                           env={"COMPLETER_CACHE_DIR": str(smol_cache)}, timeout=600)
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())["summary"]
    assert summary["ngram"]["failed"] is None and summary["ngram"]["tokens_per_s"] > 0
    failed = summary[LLAMA_SERVER]
    assert failed["failed"] == "llama-server exited at start (exit 3): error: this llama-server cannot load the model"
    assert failed["holes"] == 0 and failed["tokens_per_s"] is None
    assert f"{LLAMA_SERVER} failed after 0 holes: llama-server exited at start (exit 3)" in result.stdout


def test_a_peer_that_dies_mid_run_is_marked_failed_from_there_and_its_server_is_gone(llama_server, smol):
    pair = Pair(smol, LlamaModel(smol.target, n_gpu_layers=0), LlamaModel(smol.draft, n_gpu_layers=0))
    holes = pick_holes([REPO / "completer"], 2, seed=3)
    runner = Bench(pair, Settings(FOUR_TOKENS, ("target", LLAMA_SERVER)), llama_server=llama_server)
    try:
        first = runner.run_hole(0, holes[0])
        server = runner.peers[LLAMA_SERVER].process
        server.kill()
        server.wait()
        second = runner.run_hole(1, holes[1])
    finally:
        runner.close()
    assert "failed" not in first[1] and first[1]["tokens"]
    assert second[0]["tokens"] and second[1]["failed"].startswith("llama-server is gone (killed by SIGKILL)")
    entry = bench_report.summarize(first + second, ("target", LLAMA_SERVER), runner.engine.costs)[LLAMA_SERVER]
    assert entry["holes"] == 1 and entry["failed"].startswith("llama-server is gone")
    assert not runner.peers


def prompt_without_a_near_tie(model: LlamaModel, tokens: list[int], margin: float = 1.0) -> list[int]:
    """The first cut of `tokens` (from 300 tokens on) after which the model's likeliest
    token leads the next by `margin` in logits. A one-token request and an eight-token one
    evaluate the prompt's last token in batches of other shapes, whose kernels round
    apart: at a near tie their first tokens may differ (0.1 apart in logits flipped one
    on an AVX2 machine), and that is the difference our standard allows, not a bug."""
    context = LlamaContext(model, n_ctx=1024, n_threads=2)
    try:
        logits = context.eval(tokens[:400], 0, logits_at=list(range(299, 400)))  # [101, n_vocab]
    finally:
        context.close()
    top_two = np.sort(np.partition(logits, -2, axis=1)[:, -2:], axis=1)  # [101, 2]
    clear = np.flatnonzero(top_two[:, 1] - top_two[:, 0] >= margin)
    assert clear.size, "no cut of the file from 300 to 400 tokens has a clear next token"
    return tokens[:300 + int(clear[0])]


def test_a_peers_time_holds_the_step_that_gave_its_first_token_as_ours_does(llama_server, smol):
    """Our modes time the prompt's last token and what follows (Engine.prefill leaves it
    out of the prompt). So the peer's first request leaves it out too, and its time is
    the server's prompt_ms + predicted_ms: predicted_ms alone counts one token's step
    as nothing (a 1 us clamp), a step in 24 at --quick."""
    target = LlamaModel(smol.target, n_gpu_layers=0)
    peer = LlamaServer(llama_server, LLAMA_SERVER, target, None, 1024, 2)
    prompt = prompt_without_a_near_tie(target, target.tokenize((REPO / "completer" / "engine" / "kv.py").read_text()))
    try:
        one = peer.generate(prompt, 1, 0.0, 0)
        again = peer.generate(prompt, 8, 0.0, 0)  # the cache holds the tokens after the prompt: cut, not missed
    finally:
        peer.close()
    assert len(one.tokens) == 1 and one.tokens == again.tokens[:1]
    # Both on the server's own clock, with no HTTP in it: one step against eight (a
    # microsecond against seven steps, had the first token's step been left out).
    assert 0 < again.ms < 100 * one.ms and one.ms <= one.wall_ms
    assert again.ms <= again.wall_ms


def test_a_sliding_window_peer_is_timed_on_prompts_shorter_and_longer_than_the_window(llama_server, gemma):
    """Gemma's window is 512 tokens. With window-sized caches (llama-server's default) the
    server went back to a checkpoint 4 tokens before the primed prompt's end on every
    prompt of at most 513 tokens, and the timed request evaluated 6 (Untimed). With the
    window layers' cache full-size, as ours is, every timed request evaluates one."""
    target = LlamaModel(gemma, n_gpu_layers=0, vocab_only=True)
    text = (REPO / "completer" / "engine" / "generation.py").read_text()
    tokens = [target.special.bos, *target.tokenize(text)]
    peer = LlamaServer(llama_server, LLAMA_SERVER, target, None, 4096, 2)
    try:
        answers = [peer.generate(tokens[:n], 4, 0.0, 0).tokens for n in (1400, 408, 700, 300, 513, 514, 900)]
    finally:
        peer.close()
    assert all(len(answer) == 4 for answer in answers)


def test_the_peers_servers_stop_with_the_bench(llama_server, smol):
    pair = Pair(smol, LlamaModel(smol.target, n_gpu_layers=0), None)
    runner = Bench(pair, Settings(FOUR_TOKENS, ("target", LLAMA_SERVER)), llama_server=llama_server)
    pid = runner.peers[LLAMA_SERVER].process.pid
    runner.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)

"""The load bench (benchmarks/team_load.py) on a real llama-server with the smol pair
speculating, and on a real vLLM with n-gram drafts: one and two developers typing this
repository's history at human rates."""

from pathlib import Path

import pytest

from benchmarks.team_load import (
    OPTIONS,
    Run,
    medians,
    reset_prefix_cache,
    run_developers,
    setting_flags,
    table,
    typing_holes,
)
from tests.llama_server_process import LlamaServer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]  # its git history is the typing
SECONDS = 4.0
# The test asserts what every run must hold, on a machine other tests share: a short
# prompt, and a starved server waited for as slow rather than given up as down.
SHARED_MACHINE = {**OPTIONS, "prompt": {"prefix_lines": 32}, "models": {"server_timeout_s": 120}}


def test_developers_on_one_server_each_get_answers_for_their_own_documents(llama_server, smol, tmp_path):
    holes = typing_holes(REPO, 2, seed=1)
    server = LlamaServer(llama_server, smol.target, tmp_path / "server.log", "--metrics",
                         *setting_flags("draft-4", smol.draft), slots=2, context=8192).start()
    try:
        runs = [run_developers(server.url, holes[:count], SECONDS, "draft-4", SHARED_MACHINE) for count in (1, 2)]
    finally:
        server.stop()
    check_runs(runs)
    for run in runs:
        assert run.row["acceptance"] is None or 0 <= run.row["acceptance"] <= 1  # None: no answer ran to its end


# The CPU vLLM evaluates prompts at about 40 tokens a second here (a cold prompt of 1,212
# tokens took 29.5 s): 8 lines keep its cold prompts to seconds.
SHORT_PROMPTS = {**SHARED_MACHINE, "prompt": {"prefix_lines": 8}}


def test_developers_on_one_vllm_each_get_answers_for_their_own_documents_and_its_counters_are_read(vllm):
    holes = typing_holes(REPO, 2, seed=1)
    runs = []
    for count in (1, 2):
        reset_prefix_cache(vllm.url)  # its dev-mode endpoint, which tests/vllm_process.py's server has
        runs.append(run_developers(vllm.url, holes[:count], SECONDS, "vllm-ngram-4", SHORT_PROMPTS))
    check_runs(runs)
    print(medians([run.row for run in runs]))
    for run in runs:
        assert run.row["mean_running"] is not None and run.row["mean_running"] >= 0  # vLLM's gauge, sampled
        assert run.row["acceptance"] is None or 0 <= run.row["acceptance"] <= 1  # its draft counters


def check_runs(runs: list[Run]) -> None:
    """What every run must hold: the developers typed distinct text, each request answered
    or superseded, none with another's text, and the server's /metrics read."""
    rows = [run.row for run in runs]
    print(table(rows), *(row["failures"] for row in rows), sep="\n")
    assert [row["developers"] for row in rows] == [1, 2]
    two = runs[1]
    typed = [{o.request.text for o in two.outcomes if o.developer == developer} for developer in (0, 1)]
    assert typed[0] and typed[1] and not typed[0] & typed[1], "the developers' documents must hold distinct text"
    for run in runs:
        row = run.row
        assert row["answered"] > 0 and row["p50_ms"] > 0 and row["p95_ms"] > 0
        assert all(o.ms > 0 for o in run.outcomes if o.answered)
        assert row["answered"] + row["superseded"] == row["requests"] == len(run.outcomes), row["failures"]
        assert [(o.developer, o.request.cursor) for o in run.foreign] == []
        assert row["server_tokens_per_s"] > 0  # its /metrics read

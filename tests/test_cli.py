"""The real `completer` command, run as a subprocess."""

import pytest
from conftest import REPO, run_completer

from models.presets import PRESETS

SUBCOMMANDS = {
    "complete": "Print a completion of FILE at the cursor",
    "doctor": "llama.cpp build, GPU offload, threads, cache directory",
    "models": "List, download and inspect models.",
}


def test_help_lists_each_subcommand_with_its_docstring():
    result = run_completer("--help")
    assert result.returncode == 0
    for name, first_words in SUBCOMMANDS.items():
        line = next(line for line in result.stdout.splitlines() if line.strip().startswith(name))
        assert first_words[:30] in line


@pytest.mark.parametrize("command", [["models", "list"], ["models", "pull"], ["models", "info"], ["doctor"],
                                     ["complete"]])
def test_each_subcommand_has_help(command):
    result = run_completer(*command, "--help")
    assert result.returncode == 0
    assert "Usage: completer" in result.stdout


def test_models_list_names_every_preset_and_what_is_cached(tmp_path):
    result = run_completer("models", "list", env={"COLUMNS": "250"})
    assert result.returncode == 0
    for name in PRESETS:
        assert name in result.stdout
    assert "target missing" in result.stdout


def test_doctor_reports_the_build_offload_threads_cache_and_presets(tmp_path, smol, smol_cache):
    result = run_completer("doctor", env={"COLUMNS": "250", "COMPLETER_CACHE_DIR": str(smol_cache)})
    assert result.returncode == 0
    out = result.stdout
    for label in ["llama.cpp build", "GPU offload", "threads", "cache directory"]:
        assert label in out
    assert str(smol_cache) in out
    assert "preset smol" in out and "target cached, draft cached" in out


def test_models_info_shows_architecture_layers_vocabulary_and_fim_tokens(smol):
    result = run_completer("models", "info", str(smol.target), env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "llama" in out and "Q4_0" in out
    assert "49152 tokens" in out
    assert "none (prefix-only prompts)" in out


def test_models_info_times_a_preset(smol_cache):
    result = run_completer("models", "info", "smol", "--time", env={"COMPLETER_CACHE_DIR": str(smol_cache),
                                                                    "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("one decode step") == 2  # target and draft


def test_complete_prints_a_completion_from_the_smol_pair(smol_cache):
    result = run_completer("complete", "examples/stats.py", "--line", "19", "--col", "17", "--preset", "smol",
                           "--stats", env={"COMPLETER_CACHE_DIR": str(smol_cache)})
    assert result.returncode == 0, result.stderr
    # The cursor follows `return math.` in standard_deviation(), after variance() is defined.
    assert result.stdout.startswith("sqrt(")
    assert "prompt tokens" in result.stderr


def test_complete_refuses_a_cursor_outside_the_file():
    lines = len((REPO / "examples/stats.py").read_text().splitlines())
    result = run_completer("complete", "examples/stats.py", "--line", str(lines + 5), "--col", "1", "--preset", "smol")
    assert result.returncode == 2
    assert f"has {lines} lines" in " ".join(result.stderr.split())


def test_a_missing_model_file_is_one_clear_line(tmp_path):
    result = run_completer("complete", "examples/stats.py", "--line", "1", "--col", "1",
                           "--target", str(tmp_path / "missing.gguf"), "--draft", str(tmp_path / "missing.gguf"))
    assert result.returncode == 1
    assert "model file not found" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_preset_names_the_known_ones():
    result = run_completer("models", "pull", "gpt-5")
    assert result.returncode == 1
    assert "unknown preset 'gpt-5'" in result.stderr and "smol" in result.stderr


def test_plain_decoding_with_a_fim_target_needs_no_draft_and_shows_its_prompt(smol_fim):
    # The Hub is unreachable here: a draft lookup would fail after its retries.
    result = run_completer("complete", "examples/stats.py", "--line", "19", "--col", "17", "--target",
                           str(smol_fim), "--mode", "target", "--max-tokens", "4", "--show-prompt")
    assert result.returncode == 0, result.stderr
    prompt = result.stderr
    assert prompt.startswith("<fim_prefix>") and "return math.<fim_suffix>" in prompt
    assert prompt.rstrip().endswith("<fim_middle>")

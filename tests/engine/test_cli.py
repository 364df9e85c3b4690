"""The real `completer` command, run as a subprocess."""

import json
import os
from dataclasses import fields, replace

import click
import pytest
from click.testing import CliRunner

from completer.models.presets import PRESETS, NoDraft
from completer.cli import _config_flags, bench, complete, serve
from completer.config import CHOICES, Config
from completer.tables import plain_rows
from conftest import REPO, run_completer

pytestmark = pytest.mark.slow  # minutes of real model passes: the full suite's, not the fast tier's

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


def empty_cache_state(preset) -> str:
    """What `models list` says of a preset in an empty cache."""
    return "target missing, draft " + ("none" if isinstance(preset.draft, NoDraft) else "missing")


def test_models_list_names_every_preset_and_what_is_cached(tmp_path):
    result = run_completer("models", "list", env={"COLUMNS": "250"})
    assert result.returncode == 0
    for name in PRESETS:
        assert name in result.stdout
    assert "target missing" in result.stdout


def test_models_list_piped_keeps_each_preset_whole_on_one_line_with_its_files():
    # COLUMNS=80 is what rich assumes for a pipe: it used to fold and cut the names to fit.
    result = run_completer("models", "list", env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name, preset in PRESETS.items():
        line = next((line for line in lines if line.startswith(f"{name}\t")), None)
        assert line is not None, f"no line for {name} in:\n{result.stdout}"
        assert line.split("\t")[1:4] == [preset.target.describe(), preset.draft.describe(), empty_cache_state(preset)]
    assert lines[0] == "preset\ttarget\tdraft\tcached\twhy"


def test_models_list_json_has_every_preset_and_its_fields():
    result = run_completer("models", "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["presets"]
    assert [row["preset"] for row in rows] == list(PRESETS)
    for row, preset in zip(rows, PRESETS.values()):
        assert row == {"preset": preset.name, "target": preset.target.describe(), "draft": preset.draft.describe(),
                       "cached": empty_cache_state(preset), "why": preset.why}


def test_plain_rows_keep_one_line_per_row_whatever_the_values_hold():
    assert plain_rows(["a", "b"], [["x y\nz", "w\tv"]]) == "a\tb\nx y z\tw v"
    assert plain_rows(None, [["key", "value"]]) == "key\tvalue"


def test_doctor_reports_the_build_offload_threads_cache_and_presets(tmp_path, smol, smol_cache):
    result = run_completer("doctor", env={"COLUMNS": "80", "COMPLETER_CACHE_DIR": str(smol_cache)})
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    for label in ["llama.cpp build", "GPU offload", "threads"]:
        assert any(line.startswith(f"{label}\t") for line in lines)
    assert f"cache directory\t{smol_cache}" in lines
    assert "preset smol\ttarget cached, draft cached" in lines


def test_doctor_on_a_cpu_build_with_an_nvidia_card_says_how_to_rebuild_for_it(tmp_path, smol_cache):
    """Stand-ins for nvcc and nvidia-smi on PATH: the machine has CUDA and a card, and
    this CPU build cannot use them. Without the card, the build is what the machine has."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, output in [("nvcc", ""), ("nvidia-smi", "GPU 0: NVIDIA H200 (UUID: GPU-0)")]:
        (tools / name).write_text(f"#!/bin/sh\necho '{output}'\n")
        (tools / name).chmod(0o755)
    env = {"COMPLETER_CACHE_DIR": str(smol_cache), "PATH": f"{tools}:{os.environ['PATH']}"}
    fields = json.loads(run_completer("doctor", "--json", env=env).stdout)
    assert fields["GPU offload"].startswith("no")
    assert fields["accelerator"].startswith("cuda: nvcc at") and "NVIDIA H200" in fields["accelerator"]
    assert fields["rebuild for the GPU"].endswith("COMPLETER_GPU=cuda completer build")
    (tools / "nvidia-smi").unlink()
    fields = json.loads(run_completer("doctor", "--json", env=env).stdout)
    assert fields["accelerator"].startswith("cpu: no accelerator") and "rebuild for the GPU" not in fields


def test_doctor_json_has_the_same_rows(smol_cache):
    result = run_completer("doctor", "--json", env={"COMPLETER_CACHE_DIR": str(smol_cache)})
    assert result.returncode == 0, result.stderr
    fields = json.loads(result.stdout)
    assert {"completer", "llama-cpp-python", "llama.cpp build", "GPU offload", "threads"} <= set(fields)
    assert fields["cache directory"] == str(smol_cache)
    assert fields["preset smol"] == "target cached, draft cached"
    assert {f"preset {name}" for name in PRESETS} <= set(fields)


def test_models_info_shows_architecture_layers_vocabulary_and_fim_tokens(smol):
    result = run_completer("models", "info", str(smol.target), env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == str(smol.target)  # the title, whole
    assert "architecture\tllama" in lines and "file type\tQ4_0" in lines
    assert any(line.startswith("vocabulary\t49152 tokens") for line in lines)
    assert any(line.startswith("FIM tokens\tnone (prefix-only prompts)") for line in lines)


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


def another_value(name: str, item) -> object:
    """A value of the option other than its default, as its flag takes it."""
    if name in CHOICES:
        return next(choice for choice in CHOICES[name] if choice != item.default)
    if item.type == int | str:
        return 3
    if item.type == str | None:
        return "other.gguf"
    if item.type is bool:
        return not item.default
    return item.default + 2 if item.type in (int, float) else "other"


@pytest.mark.parametrize("group", [group.name for group in fields(Config)])
def test_each_flag_of_the_config_tree_sets_its_option_and_every_other_keeps_its_default(group):
    kind = next(item.default_factory for item in fields(Config) if item.name == group)
    flagged = [item for item in fields(kind) if item.metadata["flag"]]
    received = {}

    @click.command()
    @_config_flags(group)
    def probe(**options):
        received.update(options)

    arguments, expected = [], {}
    for item in flagged:
        expected[item.name] = another_value(f"{group}.{item.name}", item)
        arguments += [item.metadata["flag"], str(expected[item.name])]
    result = CliRunner().invoke(probe, arguments)
    assert result.exit_code == 0, result.output
    assert received[group] == replace(kind(), **expected)


def test_the_decoders_old_flag_is_taken_with_a_warning_naming_the_new_one():
    @click.command()
    @_config_flags("models")
    def probe(models):
        click.echo(models.decoder)

    old = CliRunner().invoke(probe, ["--backend", "openai"])
    assert (old.exit_code, old.stdout) == (0, "openai\n")
    assert old.stderr == "warning: --backend is deprecated: its value is read as --decoder, its new name\n"
    new = CliRunner().invoke(probe, ["--decoder", "openai"])
    assert (new.exit_code, new.stdout, new.stderr) == (0, "openai\n", "")
    both = CliRunner().invoke(probe, ["--backend", "openai", "--decoder", "llama-server"])
    assert both.exit_code == 2 and "--backend and --decoder are one option" in both.stderr
    assert "--backend" not in CliRunner().invoke(probe, ["--help"]).stdout.split("--decoder")[0]  # hidden


def test_every_flag_the_config_tree_names_is_a_flag_of_a_command_with_the_options_reason():
    flags = {parameter.opts[0]: parameter for command in (bench, complete, serve) for parameter in command.params}
    for group in fields(Config):
        for item in fields(group.default_factory):
            if item.metadata["flag"]:
                assert flags[item.metadata["flag"]].help.lower().startswith(item.metadata["doc"][:20].lower())


def test_an_unknown_preset_names_the_known_ones():
    result = run_completer("models", "pull", "gpt-5")
    assert result.returncode == 1
    assert "unknown preset 'gpt-5'" in result.stderr and "smol" in result.stderr


def test_plain_decoding_with_a_fim_target_needs_no_draft_and_shows_its_prompt(smol_fim):
    # The Hub is unreachable here: a draft lookup would fail after its retries.
    result = run_completer("complete", "examples/stats.py", "--line", "19", "--col", "17", "--target",
                           str(smol_fim), "--mode", "target", "--max-tokens", "4", "--show-prompt")
    assert result.returncode == 0, result.stderr
    sections, shown = result.stderr.split("\nprompt:\n")  # the other files it shows and why, then the prompt
    assert sections.startswith("prompt sections") and sections.endswith("examples/stats.py: the file being completed")
    prompt, note = shown.split("\nnote: ")  # smol is an instruct model: one line says so, after
    assert note.startswith("smol-fim.gguf is a chat/instruct model")
    # The file's work tree is the workspace: its name, then the file's path, as StarCoder's format has them.
    assert prompt.startswith("<repo_name>") and "<file_sep>examples/stats.py\n<fim_prefix>" in prompt
    assert "return math.<fim_suffix>" in prompt
    assert prompt.rstrip().endswith("<fim_middle>")


def test_a_target_of_ones_own_runs_without_a_draft_and_downloads_nothing(gemma, tmp_path):
    """Gemma named by path: n-gram and auto speculate with no draft model (the Hub is
    unreachable here: a draft lookup would fail); the draft modes say what to pass."""
    for mode in ("ngram", "auto"):
        result = run_completer("complete", "examples/stats.py", "--line", "19", "--col", "17", "--target", str(gemma),
                               "--mode", mode, "--max-tokens", "8", "--stats")
        assert result.returncode == 0, result.stderr
        assert f"mode {mode}" in result.stderr and "target gemma-3-270m-q4_k_m.gguf, no draft model" in result.stderr
        assert "note: gemma-3-270m-q4_k_m.gguf has no FIM tokens" in result.stderr
        assert "chat/instruct" not in result.stderr  # a base model
    assert not (tmp_path / "cache" / "hub").exists()
    for mode in ("draft", "hybrid"):
        result = run_completer("complete", "examples/stats.py", "--line", "19", "--col", "17", "--target", str(gemma),
                               "--mode", mode)
        assert result.returncode == 1
        assert "has none here: pass --draft PATH" in result.stderr and "--draft auto" in result.stderr


def test_a_bench_of_a_target_without_a_draft_names_its_file_and_refuses_the_draft_modes(gemma, tmp_path):
    code = tmp_path / "repo" / "pkg"
    code.mkdir(parents=True)
    (code / "stats.py").write_text((REPO / "examples" / "stats.py").read_text() * 3)
    out = tmp_path / "bench.json"
    result = run_completer("bench", str(tmp_path / "repo"), "--target", str(gemma), "--n", "1", "--max-tokens", "4",
                           "--modes", "ngram", "--report", str(out), timeout=600)
    assert result.returncode == 0, result.stderr
    assert "target gemma-3-270m-q4_k_m.gguf, no draft model" in result.stdout and "preset" not in result.stdout
    report = json.loads(out.read_text())
    assert report["preset"] is None and report["models"]["draft"] is None
    result = run_completer("bench", str(tmp_path / "repo"), "--target", str(gemma), "--modes", "ngram,draft")
    assert result.returncode == 2 and "draft need a draft model" in result.stderr


def test_draft_auto_takes_the_smallest_model_found_with_the_targets_vocabulary(smol, gemma, tmp_path):
    """An LM Studio folder holding smol's draft, smol itself and Gemma (another
    vocabulary, smaller than neither): `--draft auto` takes the draft and says so."""
    repo = tmp_path / "home" / ".lmstudio" / "models" / "someone" / "mixed"
    repo.mkdir(parents=True)
    for name, path in [("draft.gguf", smol.draft), ("target.gguf", smol.target), ("gemma.gguf", gemma)]:
        os.link(path, repo / name)
    env = {"HOME": str(tmp_path / "home")}
    result = run_completer("complete", "examples/stats.py", "--line", "19", "--col", "17", "--target",
                           "lmstudio:someone/mixed/target.gguf", "--draft", "auto", "--mode", "draft", "--max-tokens",
                           "4", "--stats", env=env)
    assert result.returncode == 0, result.stderr
    assert "note: draft auto: lmstudio:someone/mixed/draft.gguf" in result.stderr
    assert "target lmstudio:someone/mixed/target.gguf, draft lmstudio:someone/mixed/draft.gguf" in result.stderr
    result = run_completer("complete", "examples/stats.py", "--line", "19", "--col", "17", "--target",
                           str(repo / "gemma.gguf"), "--draft", "auto", env=env)
    assert result.returncode == 1 and "--draft auto: none of the" in result.stderr


def test_a_model_larger_than_the_machines_memory_is_one_clear_line(smol, tmp_path):
    """smol's file with a sparse tail to 4 TiB (a valid GGUF: its tensors lie inside)."""
    huge = tmp_path / "huge.gguf"
    huge.write_bytes(smol.target.read_bytes())
    os.truncate(huge, 4 * 2**40)
    result = run_completer("complete", "examples/stats.py", "--line", "19", "--col", "17", "--target", str(huge),
                           "--mode", "target")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{huge} is 4096.0 GiB, more than this machine's memory" in result.stderr
    assert "smaller quantization" in result.stderr


def test_models_info_and_doctor_show_the_attention_the_kv_memory_and_what_a_target_is_good_for(gemma):
    result = run_completer("models", "info", str(gemma), env={"COLUMNS": "300"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("attention\tsliding window of 512 tokens") for line in lines)
    # 18 layers, 1 KV head of 256 for keys and values, f16: 18,432 bytes a token.
    assert "KV cache\t18.0 KiB a token, 72 MiB at 4,096 tokens (models.context_tokens), per context" in lines
    assert any(line.startswith("note\tgemma-3-270m-q4_k_m.gguf has no FIM tokens") for line in lines)
    fields = json.loads(run_completer("doctor", "--json", "--target", str(gemma)).stdout)
    assert fields["target"] == str(gemma) and fields["attention"].startswith("sliding window of 512 tokens")
    assert fields["target notes"].startswith("gemma-3-270m-q4_k_m.gguf has no FIM tokens")
    assert "chat/instruct" not in fields["target notes"]  # a base model


def test_a_gguf_that_llama_cpp_cannot_load_is_one_clear_line_naming_it(smol, tmp_path):
    """smol without its last block's tensors: a well-formed GGUF, which llama.cpp refuses."""
    from completer.models.derive import rewrite_gguf

    broken = rewrite_gguf(smol.target, tmp_path / "broken.gguf",
                          keep_tensor=lambda tensor: not tensor.name.startswith("blk.29."))
    result = run_completer("complete", "examples/stats.py", "--line", "19", "--col", "17", "--target", str(broken))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"llama.cpp could not load {broken}" in result.stderr and "models info" in result.stderr

"""Hub downloads through the real huggingface-hub client, against a local server
that stands in for the Hub via HF_ENDPOINT."""

import hashlib

from completer.models.presets import Preset
from completer.models.resolve import resolve
from conftest import run_completer
from hub_server import FakeHub

PRESET = Preset.from_name("qwen2.5-coder-1.5b")


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def served_pair(smol):
    # Small real GGUF files under the preset's names: both share one vocabulary.
    return {
        (PRESET.target.repo, PRESET.target.filename): smol.draft,
        (PRESET.draft.repo, PRESET.draft.filename): smol.draft,
    }


def test_pull_downloads_into_the_cache_then_resolves_without_the_server(smol, tmp_path, monkeypatch):
    cache = tmp_path / "user-cache"
    env = {"COMPLETER_CACHE_DIR": str(cache)}
    with FakeHub(served_pair(smol)) as hub:
        env["HF_ENDPOINT"] = hub.url
        pulled = run_completer("models", "pull", PRESET.name, env=env)
        assert pulled.returncode == 0, pulled.stderr
        assert any(method == "GET" for method, _ in hub.requests)

    # The server is gone: the cache answers alone.
    monkeypatch.setenv("COMPLETER_CACHE_DIR", str(cache))
    files = resolve(PRESET, download=False)
    assert files.target.is_relative_to(cache / "hub")
    assert sha(files.target) == sha(smol.draft)
    assert str(files.target) in pulled.stdout

    again = run_completer("models", "pull", PRESET.name, env=env)
    assert again.returncode == 0, again.stderr
    listed = run_completer("models", "list", env={**env, "COLUMNS": "250"})
    row = next(line for line in listed.stdout.splitlines() if PRESET.name in line)
    assert "target cached" in row


def test_a_file_the_hub_does_not_have_gives_the_clear_error(smol, tmp_path):
    only_target = {(PRESET.target.repo, PRESET.target.filename): smol.draft}
    with FakeHub(only_target) as hub:
        pulled = run_completer(
            "models", "pull", PRESET.name, env={"HF_ENDPOINT": hub.url, "COMPLETER_CACHE_DIR": str(tmp_path / "c")}
        )
    assert pulled.returncode == 1
    assert f"could not download {PRESET.draft.describe()}" in pulled.stderr
    assert "completer models pull" in pulled.stderr
    assert "Traceback" not in pulled.stderr


def test_an_unreachable_hub_gives_the_clear_error(tmp_path):
    pulled = run_completer("models", "pull", PRESET.name, env={"COMPLETER_CACHE_DIR": str(tmp_path / "c")})
    assert pulled.returncode == 1
    assert "could not download" in pulled.stderr
    assert "Traceback" not in pulled.stderr

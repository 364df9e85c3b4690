"""Hub downloads through the real huggingface-hub client, against a local server
that stands in for the Hub via HF_ENDPOINT."""

import hashlib
from dataclasses import replace
from types import SimpleNamespace

import pytest

from completer.models import hub as hub_module
from completer.models.errors import ModelError
from completer.models.presets import Preset
from completer.models.resolve import cached_path, fetch, resolve
from conftest import run_completer
from hub_server import FakeHub

PRESET = Preset.from_name("qwen2.5-coder-1.5b")
PINNED = "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeed"  # a commit sha; the server's branches resolve to another


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def served_pair(smol):
    # Small real GGUF files under the preset's names: both share one vocabulary.
    return {
        (PRESET.target.repo, PRESET.target.filename): smol.draft,
        (PRESET.draft.repo, PRESET.draft.filename): smol.draft,
    }


@pytest.mark.slow  # over 4 s here: `make test-fast` keeps to 3 minutes
def test_pull_downloads_into_the_cache_then_resolves_without_the_server(smol, tmp_path, monkeypatch):
    cache = tmp_path / "user-cache"
    env = {"COMPLETER_CACHE_DIR": str(cache)}
    with FakeHub(served_pair(smol)) as hub:
        env["HF_ENDPOINT"] = hub.url
        pulled = run_completer("models", "pull", PRESET.name, env=env)
        assert pulled.returncode == 0, pulled.stderr
        assert any(method == "GET" for method, _ in hub.requests)
        # Each file at the revision its preset names.
        asked = {path for _, path in hub.requests}
        assert asked == {f"/{file.repo}/resolve/{file.revision}/{file.filename}"
                         for file in (PRESET.target, PRESET.draft)}

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


@pytest.mark.slow  # waits out the Hub client's retries
def test_an_unreachable_hub_gives_the_clear_error(tmp_path):
    pulled = run_completer("models", "pull", PRESET.name, env={"COMPLETER_CACHE_DIR": str(tmp_path / "c")})
    assert pulled.returncode == 1
    assert "could not download" in pulled.stderr
    assert "Traceback" not in pulled.stderr


def hub_files(cache):
    """What the Hub cache holds as files: downloaded blobs and the snapshot entries naming them."""
    return [p for p in (cache / "hub").rglob("*") if {"blobs", "snapshots"} & set(p.parts) and not p.is_dir()]


def test_a_pinned_file_is_asked_for_at_its_commit_and_cached_under_it(smol, tmp_path, monkeypatch):
    served = smol.draft
    pinned = replace(PRESET.target, revision=PINNED, size=served.stat().st_size, sha256=sha(served))
    monkeypatch.setenv("COMPLETER_CACHE_DIR", str(tmp_path / "cache"))
    with FakeHub({(pinned.repo, pinned.filename): served}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        path = fetch(pinned)
        assert {path for _, path in hub.requests} == {f"/{pinned.repo}/resolve/{PINNED}/{pinned.filename}"}
        assert sha(path) == sha(served)  # the whole file, the size and sha256 recorded for it
        hub.requests.clear()
        assert fetch(pinned) == path and hub.requests == []  # the cache answers for the commit
    # Found under its commit only: the same file at another revision is another download.
    assert cached_path(pinned) == path
    assert cached_path(replace(pinned, revision="main")) is None


@pytest.mark.parametrize("record, refusal", [
    ({"size": 1}, "is {size} bytes, not the 1 recorded for it"),
    ({"sha256": "0" * 64}, "has sha256 {sha256}, not the " + "0" * 64 + " recorded for it"),
], ids=["size", "sha256"])
def test_a_file_other_than_the_one_recorded_is_refused_and_not_kept(smol, tmp_path, monkeypatch, record, refusal):
    served = smol.draft
    wrong = replace(PRESET.target, revision=PINNED, **record)
    cache = tmp_path / "cache"
    monkeypatch.setenv("COMPLETER_CACHE_DIR", str(cache))
    with FakeHub({(wrong.repo, wrong.filename): served}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(ModelError) as refused:
            fetch(wrong)
        message = str(refused.value)
        assert refusal.format(size=served.stat().st_size, sha256=sha(served)) in message
        assert f"{wrong.describe()} downloaded at revision {PINNED}" in message
        assert "refused, and removed from the cache" in message
        assert hub_files(cache) == [] and cached_path(wrong) is None  # nothing kept, whole or half

        # Asked again, it is downloaded again and refused again: nothing of the first stayed to be trusted.
        hub.requests.clear()
        with pytest.raises(ModelError, match="refused"):
            fetch(wrong)
        assert any(method == "GET" for method, _ in hub.requests)
        assert hub_files(cache) == []


class CutShort:
    """A sha256 whose first block read is where Ctrl-C lands."""

    def update(self, block):
        raise KeyboardInterrupt


@pytest.mark.parametrize("published", [True, False], ids=["the published file", "another file"])
def test_a_check_cut_short_leaves_the_downloaded_file_untrusted(smol, tmp_path, monkeypatch, published):
    """huggingface-hub has put the whole file under its name when the hash starts: the
    next fetch checks it again, and returns it only if it is the file recorded."""
    served = smol.draft
    recorded = replace(PRESET.target, revision=PINNED, sha256=sha(served) if published else "0" * 64)
    cache = tmp_path / "cache"
    monkeypatch.setenv("COMPLETER_CACHE_DIR", str(cache))
    with FakeHub({(recorded.repo, recorded.filename): served}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with monkeypatch.context() as cut:
            cut.setattr(hub_module, "hashlib", SimpleNamespace(sha256=CutShort))
            with pytest.raises(KeyboardInterrupt):
                fetch(recorded)
        assert hub_files(cache)  # downloaded whole, under its name, and not checked
        if published:
            path = fetch(recorded)
            assert sha(path) == sha(served)
            hub.requests.clear()
            assert cached_path(recorded) == path and fetch(recorded) == path and hub.requests == []
        else:
            with pytest.raises(ModelError, match="refused, and removed from the cache"):
                fetch(recorded)
            assert hub_files(cache) == [] and cached_path(recorded) is None

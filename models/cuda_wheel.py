"""Build llama-cpp-python for CUDA into a wheel in the cache, for chosen GPU
architectures, on a machine that has CUDA's compiler whether or not it has a card:

    python -m completer.models.cuda_wheel --architectures "86;89;90"

then `pip install --force-reinstall <the wheel it prints>` where it is to run.
CMAKE_CUDA_ARCHITECTURES names the cards: 90 for H100/H200, 89 for RTX 40xx and L4,
86 for RTX 30xx and A10, 80 for A100; each one more adds to the build's time.

Two parts of the CUDA toolkit may be missing where only the compiler is installed:
cuBLAS, which llama.cpp's CUDA backend links, comes then from PyPI's nvidia-cublas
wheel, unpacked into the cache and named to CMake;
and the driver's libcuda, which llama.cpp links for its virtual-memory pool, is then
left out with GGML_CUDA_NO_VMM (the runtime's allocator instead). A CUDA build loads
on a machine without a card, and llama.cpp then finds no CUDA device and runs on the
CPU.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from importlib.metadata import version
from pathlib import Path

from completer.models.accelerator import ALWAYS
from completer.models.cpu_flags import cmake_cpu_args
from completer.models.paths import cache_dir

DEFAULT_ARCHITECTURES = "90"


def toolkit_root(nvcc: Path, environ: dict[str, str], usual: Path = Path("/usr/local/cuda")) -> Path:
    """The CUDA toolkit nvcc belongs to (nvcc on PATH may be a wrapper script elsewhere)."""
    places = [environ.get("CUDA_HOME"), environ.get("CUDA_PATH"), nvcc.resolve().parent.parent, usual]
    for place in filter(None, places):
        if (Path(place) / "include" / "cuda_runtime.h").is_file():
            return Path(place).resolve()
    raise SystemExit(f"no CUDA toolkit around {nvcc}: set CUDA_HOME to the folder with bin/nvcc and include/")


def has_cublas(root: Path) -> bool:
    return (root / "include" / "cublas_v2.h").is_file()


def has_driver_library(root: Path) -> bool:
    """The driver's libcuda (or the toolkit's stub of it), which links the VMM pool."""
    places = [root / "lib64" / "stubs", root / "lib" / "stubs", root / "lib64", root / "lib"]
    return any((place / "libcuda.so").exists() for place in places)


def cuda_major(nvcc: Path) -> int:
    found = re.search(r"release (\d+)\.", subprocess.run([str(nvcc), "--version"], capture_output=True,
                                                          text=True).stdout)
    if not found:
        raise SystemExit(f"{nvcc} --version does not say its release")
    return int(found.group(1))


def cublas_from_pypi(major: int, into: Path) -> list[str]:
    """PyPI's cuBLAS wheel for this CUDA release, unpacked into `into` (once), and the
    CMake flags that take its libraries and headers instead of the toolkit's."""
    package = "nvidia-cublas" if major >= 13 else f"nvidia-cublas-cu{major}"
    if not any(into.rglob("include/cublas_v2.h")):
        downloads = into / "downloads"
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", f"{package}<{major + 1}",
                        "-d", str(downloads)], check=True)
        with zipfile.ZipFile(next(downloads.glob("*.whl"))) as wheel:
            wheel.extractall(into)
        shutil.rmtree(downloads)
    cublas = next(into.rglob("include/cublas_v2.h")).parent.parent
    library = cublas / "lib"
    # The libraries are named here; the headers are added to both compilers' search.
    # The build's RPATH keeps this folder, so the wheel loads them from the cache.
    return [f"-DCUDA_cublas_LIBRARY={library / f'libcublas.so.{major}'}",
            f"-DCUDA_cublasLt_LIBRARY={library / f'libcublasLt.so.{major}'}",
            f"-DCMAKE_CUDA_FLAGS=-I{cublas / 'include'}", f"-DCMAKE_CXX_FLAGS=-I{cublas / 'include'}"]


def wheels_dir() -> Path:
    return cache_dir() / "wheels"


def wheel_folder(major: int, architectures: str) -> Path:
    """Where the wheel for this llama-cpp-python, CUDA release and architectures goes."""
    label = re.sub(r"[^0-9a-z]+", "-", architectures.lower()).strip("-")
    return wheels_dir() / f"llama-cpp-python-{version('llama_cpp_python')}-cuda{major}-sm{label}"


def cuda_flags(root: Path, major: int, architectures: str) -> tuple[list[str], list[str]]:
    """The CMake flags of a CUDA build with the toolkit at `root` (this CPU's and the
    RPC backend's included), and what the build does differently from a full toolkit's."""
    flags = [*cmake_cpu_args(), *ALWAYS, "-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={architectures}",
             f"-DCMAKE_CUDA_COMPILER={root / 'bin' / 'nvcc'}", f"-DCUDAToolkit_ROOT={root}"]
    notes = []
    if not has_cublas(root):
        notes.append(f"the toolkit at {root} has no cuBLAS: using PyPI's nvidia-cublas")
        flags += cublas_from_pypi(major, wheels_dir() / f"cublas-cuda{major}")
    if not has_driver_library(root):
        notes.append("no libcuda (nor its stub) in the toolkit: building without the VMM pool (GGML_CUDA_NO_VMM)")
        flags.append("-DGGML_CUDA_NO_VMM=ON")
    return flags, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--architectures", default=DEFAULT_ARCHITECTURES,
                        help=f"CMAKE_CUDA_ARCHITECTURES, e.g. '86;89;90' (default {DEFAULT_ARCHITECTURES})")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="compiler processes (default: every core)")
    args = parser.parse_args(argv)
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("no nvcc on PATH: install the CUDA toolkit", file=sys.stderr)
        return 2
    root = toolkit_root(Path(nvcc), dict(os.environ))
    major = cuda_major(root / "bin" / "nvcc")
    flags, notes = cuda_flags(root, major, args.architectures)
    for note in notes:
        print(note, file=sys.stderr)
    pin = version("llama_cpp_python")
    print(f"building llama-cpp-python {pin} for CUDA {major}, architectures {args.architectures}:\n  "
          f"CMAKE_ARGS={' '.join(flags)}", file=sys.stderr)
    out = wheel_folder(major, args.architectures)
    started = time.monotonic()
    environment = {**os.environ, "CMAKE_ARGS": " ".join(flags), "CMAKE_BUILD_PARALLEL_LEVEL": str(args.jobs)}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--no-binary",
                    "llama-cpp-python", f"llama-cpp-python=={pin}", "-w", str(out)], check=True, env=environment)
    minutes = (time.monotonic() - started) / 60
    wheel = next(out.glob("llama_cpp_python-*.whl"))
    print(f"built in {minutes:.1f} min: {wheel} ({wheel.stat().st_size / 2**20:.0f} MiB)", file=sys.stderr)
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())

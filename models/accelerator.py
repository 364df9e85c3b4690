"""Which accelerator llama.cpp is built for, and the CMake flags that build it.

COMPLETER_GPU=cuda|hip|vulkan|metal|cpu chooses; unset, the machine decides:

    cuda    nvcc is found and an NVIDIA device is present (`nvidia-smi -L` lists one,
            or /proc/driver/nvidia/gpus has an entry): a compiler alone is not a GPU,
            and machines with CUDA's compiler and no card must keep the CPU build
    hip     hipcc is found and an AMD device is present (`rocminfo` names a gfx target)
    metal   macOS on Apple silicon, where llama.cpp builds Metal by default
    vulkan  glslc is found, a GPU render node (/dev/dri/renderD*) is present, and the
            Vulkan headers are new enough for the pinned llama.cpp
    cpu     otherwise, with this CPU's SIMD flags and no AMX (cpu_flags)

The CPU flags go with every choice: llama.cpp keeps its CPU backend beside a GPU one.
So does the RPC backend, which offloads to another process's device (models.rpc_servers)
and is the real device the tests offload to on machines without a GPU.
What was chosen, and why, goes to stderr; the flags to stdout. Stdlib only, and
runnable as a script (`python3 models/accelerator.py`), so that the flags can be had
before anything is installed (a llama-cpp-python built by hand with them as CMAKE_ARGS).
"""

import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__:
    from .cpu_flags import cmake_cpu_args
else:  # run as a script, before the package is installed
    from cpu_flags import cmake_cpu_args

CHOICES = ("cuda", "hip", "vulkan", "metal", "cpu")
# The pinned llama.cpp's Vulkan backend uses vk::LayerSettingEXT (VK_EXT_layer_settings),
# which entered the public Vulkan headers in 1.3.272; Debian 12 ships 1.3.239.
VULKAN_HEADERS_NEEDED = 272
# Backends every build has, whatever the accelerator.
ALWAYS = ["-DGGML_RPC=ON"]


class BuildChoiceError(ValueError):
    """COMPLETER_GPU asks for an accelerator this machine cannot build."""


@dataclass(frozen=True)
class Choice:
    accelerator: str
    reason: str
    cmake_args: list[str]


def _output(command: list[str]) -> str:
    """What a tool prints, or "" when it fails or is missing."""
    if shutil.which(command[0]) is None:
        return ""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def nvidia_device(root: Path) -> str:
    """The first NVIDIA device's description, or "" when none is present."""
    listed = next((line.strip() for line in _output(["nvidia-smi", "-L"]).splitlines() if line.strip()), "")
    if listed.startswith("GPU "):
        return listed
    gpus = root / "proc/driver/nvidia/gpus"
    found = sorted(gpus.iterdir()) if gpus.is_dir() else []
    return str(found[0]) if found else ""


def amd_targets() -> list[str]:
    """The gfx targets `rocminfo` names (gfx000 is its CPU agent), or []."""
    return sorted(set(re.findall(r"\bgfx[0-9a-f]+\b", _output(["rocminfo"]))) - {"gfx000"})


def vulkan_header_version(root: Path, environ: dict[str, str]) -> int | None:
    """VK_HEADER_VERSION of the Vulkan headers the build would find, None without them."""
    places = [Path(environ["VULKAN_SDK"]) / "include"] if environ.get("VULKAN_SDK") else []
    places.append(root / "usr/include")
    for include in places:
        header = include / "vulkan/vulkan_core.h"
        if header.is_file():
            found = re.search(r"#define\s+VK_HEADER_VERSION\s+(\d+)", header.read_text(errors="replace"))
            if found:
                return int(found.group(1))
    return None


def render_node(root: Path) -> bool:
    return any((root / "dev/dri").glob("renderD*"))


def _cuda(root: Path, forced: bool) -> Choice | str:
    """The CUDA choice, or why not."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "no nvcc on PATH (install the CUDA toolkit)"
    device = nvidia_device(root)
    if device:
        # native: compile for the card that is here only, the fastest build.
        return Choice("cuda", f"nvcc at {nvcc} and an NVIDIA device ({device})",
                      ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=native"])
    if forced:  # no card to compile for: llama.cpp's own list of architectures
        return Choice("cuda", f"COMPLETER_GPU=cuda, nvcc at {nvcc}; no NVIDIA device here, so llama.cpp's "
                      "default architectures", ["-DGGML_CUDA=ON"])
    return f"nvcc at {nvcc} but no NVIDIA device (nvidia-smi -L lists none, no /proc/driver/nvidia/gpus)"


def _hip(forced: bool) -> Choice | str:
    hipcc = shutil.which("hipcc")
    if hipcc is None:
        return "no hipcc on PATH (install ROCm)"
    targets = amd_targets()
    if targets:
        return Choice("hip", f"hipcc at {hipcc} and an AMD device ({', '.join(targets)})",
                      ["-DGGML_HIP=ON", f"-DAMDGPU_TARGETS={';'.join(targets)}"])
    if forced:
        return Choice("hip", f"COMPLETER_GPU=hip, hipcc at {hipcc}; no AMD device here, so llama.cpp's default "
                      "targets", ["-DGGML_HIP=ON"])
    return f"hipcc at {hipcc} but no AMD device (rocminfo names no gfx target)"


def _vulkan(root: Path, environ: dict[str, str], forced: bool) -> Choice | str:
    version = vulkan_header_version(root, environ)
    if version is None:
        return "no Vulkan headers (vulkan/vulkan_core.h; install the Vulkan SDK or libvulkan-dev)"
    if version < VULKAN_HEADERS_NEEDED:
        return (f"the Vulkan headers are 1.x.{version}, and the pinned llama.cpp needs 1.3.{VULKAN_HEADERS_NEEDED} "
                "or newer (VK_EXT_layer_settings): install a newer Vulkan SDK and set VULKAN_SDK")
    if shutil.which("glslc") is None:
        return "no glslc on PATH (the shader compiler, in the Vulkan SDK or the glslc package)"
    if not forced and not render_node(root):
        return "Vulkan headers and glslc, but no GPU render node (/dev/dri/renderD*)"
    return Choice("vulkan", f"Vulkan headers 1.x.{version} and glslc", ["-DGGML_VULKAN=ON"])


def _metal(system: str, machine: str) -> Choice | str:
    if system == "Darwin" and machine == "arm64":
        return Choice("metal", "macOS on Apple silicon: llama.cpp builds Metal by default", [])
    return "Metal is for macOS on Apple silicon"


def choose(environ: dict[str, str] | None = None, root: Path = Path("/"), system: str | None = None,
           machine: str | None = None, cpuinfo: Path = Path("/proc/cpuinfo")) -> Choice:
    """The accelerator to build for, why, and its CMake flags (the CPU's and ALWAYS included)."""
    environ = dict(os.environ if environ is None else environ)
    system, machine = system or platform.system(), machine or platform.machine()
    asked = environ.get("COMPLETER_GPU", "").strip().lower()
    if asked and asked not in CHOICES:
        raise BuildChoiceError(f"COMPLETER_GPU={asked!r}: one of {', '.join(CHOICES)}")
    attempts = {
        "cuda": lambda forced: _cuda(root, forced),
        "hip": _hip,
        "metal": lambda forced: _metal(system, machine),
        "vulkan": lambda forced: _vulkan(root, environ, forced),
    }
    cpu = [*cmake_cpu_args(cpuinfo), *ALWAYS]
    if asked == "cpu":
        return Choice("cpu", "COMPLETER_GPU=cpu", cpu)
    if asked:
        result = attempts[asked](True)
        if isinstance(result, str):
            raise BuildChoiceError(f"COMPLETER_GPU={asked}, but {result}")
        return Choice(result.accelerator, result.reason, [*cpu, *result.cmake_args])
    passed_over = []
    for name, attempt in attempts.items():
        result = attempt(False)
        if isinstance(result, Choice):
            return Choice(result.accelerator, result.reason, [*cpu, *result.cmake_args])
        passed_over.append(f"{name}: {result}")
    return Choice("cpu", "no accelerator to build for (" + "; ".join(passed_over) + ")", cpu)


def main() -> int:
    try:
        choice = choose()
    except BuildChoiceError as error:
        print(f"llama.cpp build: {error}", file=sys.stderr)
        return 2
    print(f"llama.cpp build: {choice.accelerator}: {choice.reason}", file=sys.stderr)
    print(" ".join(choice.cmake_args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Which accelerator the build picks, with stand-in tools on PATH and a stand-in root
for /proc, /dev and /usr/include: a compiler alone is never taken for a GPU. And the CPU's
flags from a stand-in /proc/cpuinfo: AMX never, AVX-512 where the CPU has it unless
COMPLETER_CPU_FEATURES=avx2 asks for an AVX2 machine's build, cached beside the other."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from completer.models import llama_build
from completer.models.accelerator import ALWAYS, VULKAN_HEADERS_NEEDED, BuildChoiceError, choose
from completer.models.cpu_flags import FEATURES_ENV, cmake_cpu_args
from completer.models.llama_build import LlamaBuildError


def cpu_build() -> list[str]:
    """The flags of a CPU build: this CPU's, and the backends every build has (RPC)."""
    return [*cmake_cpu_args(), *ALWAYS]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """An empty PATH and root; `tool(name, output)` puts a stand-in program on PATH."""
    bin_dir, root = tmp_path / "bin", tmp_path / "root"
    bin_dir.mkdir()
    root.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))

    def tool(name: str, output: str = "") -> None:
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\nprintf '%s\\n' {output!r}\n")  # a shell builtin: PATH holds these alone
        path.chmod(0o755)

    return tool, root


def linux(root: Path, **environ: str):
    return choose(environ, root, system="Linux", machine="x86_64")


def vulkan_headers(root: Path, version: int) -> None:
    header = root / "usr/include/vulkan/vulkan_core.h"
    header.parent.mkdir(parents=True)
    header.write_text(f"#define VK_HEADER_VERSION {version}\n")


def test_nvcc_without_a_device_keeps_the_cpu_build_and_says_why(machine):
    """This project's machines: CUDA's compiler, no card."""
    tool, root = machine
    tool("nvcc")
    tool("nvidia-smi", "No devices were found")
    choice = linux(root)
    assert choice.accelerator == "cpu" and choice.cmake_args == cpu_build()
    assert "nvcc at" in choice.reason and "no NVIDIA device" in choice.reason


def test_nvcc_and_an_nvidia_device_build_cuda_for_that_card(machine):
    tool, root = machine
    tool("nvcc")
    tool("nvidia-smi", "GPU 0: NVIDIA H200 (UUID: GPU-1234)")
    choice = linux(root)
    assert choice.accelerator == "cuda" and "NVIDIA H200" in choice.reason
    assert choice.cmake_args == [*cpu_build(), "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=native"]


def test_the_driver_s_proc_entry_is_a_device_too(machine):
    tool, root = machine
    tool("nvcc")
    (root / "proc/driver/nvidia/gpus/0000:01:00.0").mkdir(parents=True)
    assert linux(root).accelerator == "cuda"


def test_a_device_without_nvcc_is_not_cuda(machine):
    tool, root = machine
    tool("nvidia-smi", "GPU 0: NVIDIA GeForce RTX 4090")
    choice = linux(root)
    assert choice.accelerator == "cpu" and "no nvcc" in choice.reason


def test_hipcc_and_an_amd_device_build_hip_for_its_targets(machine):
    tool, root = machine
    tool("hipcc")
    tool("rocminfo", "  Name:                    gfx000\n  Name:                    gfx1100\n  Name:   gfx1100")
    choice = linux(root)
    assert choice.accelerator == "hip"
    assert choice.cmake_args[-2:] == ["-DGGML_HIP=ON", "-DAMDGPU_TARGETS=gfx1100"]


def test_apple_silicon_gets_metal_llama_cpp_s_default():
    choice = choose({}, Path("/nonexistent"), system="Darwin", machine="arm64")
    assert choice.accelerator == "metal" and choice.cmake_args == cpu_build()


def test_vulkan_needs_headers_new_enough_for_the_pinned_llama_cpp(machine):
    tool, root = machine
    tool("glslc")
    (root / "dev/dri").mkdir(parents=True)
    (root / "dev/dri/renderD128").touch()
    vulkan_headers(root, 239)  # Debian 12's
    choice = linux(root)
    assert choice.accelerator == "cpu" and f"1.3.{VULKAN_HEADERS_NEEDED}" in choice.reason
    with pytest.raises(BuildChoiceError, match="1.x.239"):  # asked for: refused now, not mid-build
        linux(root, COMPLETER_GPU="vulkan")
    (root / "usr/include/vulkan/vulkan_core.h").write_text(f"#define VK_HEADER_VERSION {VULKAN_HEADERS_NEEDED}\n")
    choice = linux(root)
    assert choice.accelerator == "vulkan" and choice.cmake_args[-1] == "-DGGML_VULKAN=ON"


def test_vulkan_without_a_gpu_render_node_is_not_chosen_unless_asked_for(machine):
    tool, root = machine
    tool("glslc")
    vulkan_headers(root, 300)
    assert linux(root).accelerator == "cpu"
    assert linux(root, COMPLETER_GPU="vulkan").accelerator == "vulkan"


def test_completer_gpu_overrides_the_machine(machine):
    tool, root = machine
    tool("nvcc")
    tool("nvidia-smi", "GPU 0: NVIDIA H200")
    assert linux(root, COMPLETER_GPU="cpu").cmake_args == cpu_build()
    forced = linux(root, COMPLETER_GPU="CUDA")
    assert forced.accelerator == "cuda"
    with pytest.raises(BuildChoiceError, match="hipcc"):
        linux(root, COMPLETER_GPU="hip")
    with pytest.raises(BuildChoiceError, match="one of cuda, hip, vulkan, metal, cpu"):
        linux(root, COMPLETER_GPU="tpu")


def test_cuda_asked_for_without_a_card_uses_llama_cpp_s_default_architectures(machine):
    """What a user building a wheel for another machine types: COMPLETER_GPU=cuda."""
    tool, root = machine
    tool("nvcc")
    choice = linux(root, COMPLETER_GPU="cuda")
    assert choice.cmake_args == [*cpu_build(), "-DGGML_CUDA=ON"]


def test_the_script_prints_the_flags_and_says_what_it_chose(machine, tmp_path):
    """As a script, before anything is installed: flags on stdout, the choice
    on stderr, and a refusal as exit status 2 with nothing on stdout."""
    tool, _ = machine
    tool("nvcc")
    vulkan_headers(tmp_path / "sdk", 239)  # found first, through VULKAN_SDK
    script = [sys.executable, str(REPO / "models/accelerator.py")]
    environ = {**os.environ, "COMPLETER_GPU": "cpu", "VULKAN_SDK": str(tmp_path / "sdk/usr")}
    done = subprocess.run(script, capture_output=True, text=True, env=environ, check=True)
    assert done.stdout.split() == cpu_build()
    assert done.stderr.startswith("llama.cpp build: cpu: COMPLETER_GPU=cpu")
    refused = subprocess.run(script, capture_output=True, text=True, env={**environ, "COMPLETER_GPU": "vulkan"})
    assert refused.returncode == 2 and refused.stdout == "" and "Vulkan headers" in refused.stderr


def cpuinfo_with(tmp_path: Path, flags: str) -> Path:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    return cpuinfo


# A CPU with AVX-512 (and AMX, which some virtual machines advertise and fault on).
AVX512_CPU = "fpu avx avx2 fma f16c bmi2 avx_vnni avx512f avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8"
AVX2_OPTIONS = {"-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON"}
NEWER_OPTIONS = ("GGML_AVX_VNNI", "GGML_AVX512", "GGML_AVX512_VBMI", "GGML_AVX512_VNNI", "GGML_AVX512_BF16")
AMX_OFF = {"-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"}


def test_the_cpu_flags_name_each_simd_feature_and_never_amx(tmp_path):
    cpuinfo = cpuinfo_with(tmp_path, "fpu avx avx2 fma amx_tile amx_int8 avx512f")
    args = cmake_cpu_args(cpuinfo, {})
    assert {"-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_AVX512=ON", "-DGGML_AVX512_BF16=OFF"} <= set(args)
    assert AMX_OFF <= set(args)
    assert cmake_cpu_args(tmp_path / "no-such-file", {}) == ["-DGGML_NATIVE=ON"]


def test_the_avx2_build_turns_avx512_off_where_the_cpu_has_it(tmp_path):
    cpuinfo = cpuinfo_with(tmp_path, AVX512_CPU)
    native = cmake_cpu_args(cpuinfo, {FEATURES_ENV: "native"})
    avx2 = cmake_cpu_args(cpuinfo, {FEATURES_ENV: "AVX2"})
    assert cmake_cpu_args(cpuinfo, {}) == native
    assert AVX2_OPTIONS | AMX_OFF <= set(native) & set(avx2)
    assert set(native) - set(avx2) == {f"-D{option}=ON" for option in NEWER_OPTIONS}
    assert set(avx2) - set(native) == {f"-D{option}=OFF" for option in NEWER_OPTIONS}
    with pytest.raises(ValueError, match=f"{FEATURES_ENV}='avx512': one of native, avx2"):
        cmake_cpu_args(cpuinfo, {FEATURES_ENV: "avx512"})
    with pytest.raises(ValueError, match="is for x86-64 Linux"):  # no /proc/cpuinfo: macOS
        cmake_cpu_args(tmp_path / "no-such-file", {FEATURES_ENV: "avx2"})


def test_the_avx2_build_is_cached_beside_the_native_one(machine, tmp_path, monkeypatch):
    """`COMPLETER_CPU_FEATURES=avx2 make test` on a machine with AVX-512: the build
    (`python -m completer.models.llama_build`, which the Makefile runs first) is another
    folder of the cache, and the native one stays for the next plain `make test`."""
    _, root = machine
    cpuinfo = cpuinfo_with(tmp_path, AVX512_CPU)
    monkeypatch.setattr(llama_build, "choose", lambda: choose({}, root, "Linux", "x86_64", cpuinfo))
    monkeypatch.delenv(FEATURES_ENV, raising=False)
    native = llama_build.build_path()
    monkeypatch.setenv(FEATURES_ENV, "avx2")
    avx2 = llama_build.build_path()
    assert "-DGGML_AVX512=OFF" in llama_build.cmake_args()
    assert avx2.parent == native.parent and avx2.name != native.name
    monkeypatch.setenv(FEATURES_ENV, "avx512")
    with pytest.raises(LlamaBuildError, match=f"{FEATURES_ENV}='avx512': one of native, avx2"):
        llama_build.build_path()

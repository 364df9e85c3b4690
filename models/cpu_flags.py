"""CMake flags that build llama.cpp for this CPU, without AMX.

GGML_NATIVE builds with -march=native, which turns on AMX wherever the CPU advertises
it. Some virtual machines advertise AMX but fault on its first tile instruction
(SIGILL inside libggml-cpu on the first matrix product), so this CPU's other SIMD
features are listed one by one and AMX is left out. Elsewhere than x86-64 Linux the
native build is kept.

COMPLETER_CPU_FEATURES=avx2 builds what a machine with AVX2 and nothing newer gets,
even on one with AVX-512: llama.cpp's CPU kernels differ between the two, so a result
one gives exactly may not be the other's, and the tests can be run on both
(`COMPLETER_CPU_FEATURES=avx2 make test`). Its flags differ, so its build is cached
beside the native one (models/llama_build.py keys the cache on the flags).

Stdlib only, and runnable as a script (`python3 models/cpu_flags.py`), as
models/accelerator.py is. The one llama.cpp build (models/llama_build.py: the library,
llama-server and ggml-rpc-server) and the CUDA wheel's build get these flags.
"""

import os
import platform
from collections.abc import Mapping
from pathlib import Path

FEATURES_ENV = "COMPLETER_CPU_FEATURES"
FEATURES = ("native", "avx2")  # native: all this CPU has, AMX aside (the default)
AMX_OFF = ["-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
# /proc/cpuinfo's flag -> ggml's CMake option
OPTION_FOR = {"avx": "GGML_AVX", "avx2": "GGML_AVX2", "fma": "GGML_FMA", "f16c": "GGML_F16C", "bmi2": "GGML_BMI2",
              "avx_vnni": "GGML_AVX_VNNI", "avx512f": "GGML_AVX512", "avx512vbmi": "GGML_AVX512_VBMI",
              "avx512_vnni": "GGML_AVX512_VNNI", "avx512_bf16": "GGML_AVX512_BF16"}
# What an AVX2 machine lacks: AVX-512, and AVX-VNNI (AVX-512's VNNI in AVX2's encoding,
# on the CPUs that came with AVX-512 or after it).
NEWER_THAN_AVX2 = {"avx_vnni", "avx512f", "avx512vbmi", "avx512_vnni", "avx512_bf16"}


class CpuFeaturesError(ValueError):
    """COMPLETER_CPU_FEATURES names a build this machine cannot have."""


def asked_features(environ: Mapping[str, str]) -> str:
    asked = environ.get(FEATURES_ENV, "").strip().lower() or "native"
    if asked not in FEATURES:
        raise CpuFeaturesError(f"{FEATURES_ENV}={asked!r}: one of {', '.join(FEATURES)}")
    return asked


def cmake_cpu_args(cpuinfo: Path = Path("/proc/cpuinfo"), environ: Mapping[str, str] | None = None) -> list[str]:
    """The CPU's CMake flags; `environ` (os.environ when None) may ask for the AVX2 build."""
    features = asked_features(os.environ if environ is None else environ)
    if platform.machine() != "x86_64" or not cpuinfo.is_file():
        if features != "native":
            raise CpuFeaturesError(f"{FEATURES_ENV}={features} is for x86-64 Linux, where /proc/cpuinfo lists "
                                   "the CPU's features")
        return ["-DGGML_NATIVE=ON"]
    flags_line = next((line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), "")
    flags = set(flags_line.partition(":")[2].split())
    if features == "avx2":
        flags -= NEWER_THAN_AVX2
    return AMX_OFF + [f"-D{option}={'ON' if flag in flags else 'OFF'}" for flag, option in OPTION_FOR.items()]


if __name__ == "__main__":
    print(" ".join(cmake_cpu_args()))

"""CMake flags that build llama.cpp for this CPU, without AMX.

GGML_NATIVE builds with -march=native, which turns on AMX wherever the CPU advertises
it. Some virtual machines advertise AMX but fault on its first tile instruction
(SIGILL inside libggml-cpu on the first matrix product), so this CPU's other SIMD
features are listed one by one and AMX is left out. Elsewhere than x86-64 Linux the
native build is kept.

Stdlib only, and runnable as a script (`python3 models/cpu_flags.py`), as
models/accelerator.py is. The one llama.cpp build (models/llama_build.py: the library,
llama-server and ggml-rpc-server) and the CUDA wheel's build get these flags.
"""

import platform
from pathlib import Path

AMX_OFF = ["-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
# /proc/cpuinfo's flag -> ggml's CMake option
OPTION_FOR = {"avx": "GGML_AVX", "avx2": "GGML_AVX2", "fma": "GGML_FMA", "f16c": "GGML_F16C", "bmi2": "GGML_BMI2",
              "avx_vnni": "GGML_AVX_VNNI", "avx512f": "GGML_AVX512", "avx512vbmi": "GGML_AVX512_VBMI",
              "avx512_vnni": "GGML_AVX512_VNNI", "avx512_bf16": "GGML_AVX512_BF16"}


def cmake_cpu_args(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    if platform.machine() != "x86_64" or not cpuinfo.is_file():
        return ["-DGGML_NATIVE=ON"]
    flags_line = next((line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), "")
    flags = set(flags_line.partition(":")[2].split())
    return AMX_OFF + [f"-D{option}={'ON' if flag in flags else 'OFF'}" for flag, option in OPTION_FOR.items()]


if __name__ == "__main__":
    print(" ".join(cmake_cpu_args()))

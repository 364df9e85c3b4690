"""The CUDA wheel's build flags from a stand-in toolkit, and, where a CUDA wheel was
built on this machine (`python -m completer.models.cuda_wheel`), that build loading
here without a GPU and completing on the CPU as the CPU build does."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from completer.models.cuda_wheel import cuda_flags, cuda_major, toolkit_root, wheel_folder

# Where `python -m completer.models.cuda_wheel` puts its wheels by default (the tests'
# own cache directory is a fresh one per test).
BUILT_WHEELS = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "completer" / "wheels"


def stand_in_toolkit(folder: Path, driver_stub: bool = True) -> Path:
    """A CUDA 13 toolkit's layout: nvcc, the runtime's and cuBLAS's headers, libcuda's stub."""
    (folder / "bin").mkdir(parents=True)
    nvcc = folder / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    (folder / "include").mkdir()
    for header in ("cuda_runtime.h", "cublas_v2.h"):
        (folder / "include" / header).write_text("")
    if driver_stub:
        (folder / "lib64" / "stubs").mkdir(parents=True)
        (folder / "lib64" / "stubs" / "libcuda.so").write_text("")
    return folder


def test_a_wrapper_nvcc_on_path_leads_to_its_toolkit_and_the_flags_name_the_architectures(tmp_path):
    toolkit = stand_in_toolkit(tmp_path / "cuda-13.0")
    wrapper = tmp_path / "bin" / "nvcc"  # as /usr/local/bin/nvcc here: a script that execs the real one
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {toolkit}/bin/nvcc \"$@\"\n")
    assert toolkit_root(wrapper, {"CUDA_HOME": str(toolkit)}) == toolkit
    assert cuda_major(toolkit / "bin" / "nvcc") == 13
    flags, notes = cuda_flags(toolkit, 13, "86;89;90")
    assert {"-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=86;89;90", "-DGGML_RPC=ON",
            f"-DCUDAToolkit_ROOT={toolkit}", f"-DCMAKE_CUDA_COMPILER={toolkit}/bin/nvcc"} <= set(flags)
    assert "-DGGML_CUDA_NO_VMM=ON" not in flags and notes == []
    assert wheel_folder(13, "86;89;90").name.endswith("-cuda13-sm86-89-90")


def test_without_the_drivers_library_the_build_leaves_out_the_vmm_pool_and_says_so(tmp_path):
    toolkit = stand_in_toolkit(tmp_path / "cuda", driver_stub=False)
    flags, notes = cuda_flags(toolkit, 13, "90")
    assert flags[-1] == "-DGGML_CUDA_NO_VMM=ON"
    assert notes == ["no libcuda (nor its stub) in the toolkit: building without the VMM pool (GGML_CUDA_NO_VMM)"]


def test_no_toolkit_around_nvcc_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no CUDA toolkit around .*set CUDA_HOME"):
        toolkit_root(tmp_path / "bin" / "nvcc", {}, usual=tmp_path / "no-cuda")


# Run with the CUDA build first on sys.path: what it sees and what it completes.
PROBE = """
import json, sys
import llama_cpp
from completer.models.llama import LlamaContext, LlamaModel
from completer.models.devices import backends, devices
model = LlamaModel(sys.argv[1])  # auto: every layer where llama.cpp has a device
context = LlamaContext(model, n_ctx=512)
tokens = model.tokenize("def fibonacci(n):\\n")
out = [int(context.eval(tokens, 0, logits_at=[-1], argmax=True)[0])]
for step in range(7):
    out.append(int(context.eval(out[-1:], len(tokens) + step, logits_at=[0], argmax=True)[0]))
print(json.dumps({"module": llama_cpp.__file__, "backends": backends(), "gpu_layers": model.gpu_layers,
                  "devices": [d.name for d in devices()], "tokens": out}))
"""


@pytest.mark.slow  # a CUDA build of llama.cpp, loaded in a subprocess
def test_the_cuda_build_loads_without_a_gpu_and_completes_on_the_cpu_as_the_cpu_build_does(smol, tmp_path):
    wheels = sorted(BUILT_WHEELS.glob("llama-cpp-python-*-cuda*/llama_cpp_python-*.whl"))
    if not wheels:
        pytest.skip(f"no CUDA wheel in {BUILT_WHEELS}: `python -m completer.models.cuda_wheel` builds one")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                    str(wheels[-1])], check=True)
    results = {}
    for build, path in [("cuda", f"{site}{os.pathsep}"), ("cpu", "")]:
        done = subprocess.run([sys.executable, "-c", PROBE, str(smol.target)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": path + os.environ.get("PYTHONPATH", "")})
        assert done.returncode == 0, done.stderr[-2000:]
        results[build] = json.loads(done.stdout.splitlines()[-1])
    cuda, cpu = results["cuda"], results["cpu"]
    assert cuda["module"].startswith(str(site)) and "CUDA" in cuda["backends"] and "CUDA" not in cpu["backends"]
    assert not any(name.startswith("CUDA") for name in cuda["devices"])  # no card: llama.cpp finds none
    assert cuda["gpu_layers"] == 0 and cuda["tokens"] == cpu["tokens"]

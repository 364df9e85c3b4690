# The two commands the README starts with. Each sets up .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: demo test test-fast llama

# The main job, offline, on an embedded model: what speculation buys on this project's
# own sources. Gemma 3 270M rather than smol: on held-out code it completed better
# (edit similarity 0.47 against 0.29-0.34) and gained as much from speculation
# (README, "Set up and run").
demo: llama
	$(BIN)/completer bench --quick --preset gemma3-270m

# The whole test suite; .ci/run calls this. The VS Code extension is built, unit-tested
# and packaged first (its toolchain, code-server and chromium, is installed once per
# machine), and vLLM's CPU build goes into its own venv in the cache (models/vllm_env.py,
# once per machine); pytest then drives the .vsix in code-server and the Neovim plugin in
# nvim, and the language server on a real vLLM.
test: llama
	editor-extensions/vscode/scripts/build.sh
	$(BIN)/python -m completer.models.vllm_env install
	$(BIN)/python -m pytest

# While changing code: the first tier (tests/unit: no model, no process) and the tiers on
# the real smol pair and the language server without their `slow` tests (the editors,
# llama-server and vLLM, distillation, the statistical sampling tests). `make test` runs
# everything; the time each takes on this project's machine is in docs/setup.md.
test-fast: llama
	$(BIN)/python -m pytest -m "not slow" tests/unit tests/engine tests/lsp

# The llama.cpp build the flags ask for now, the bindings linked to it: nothing to do
# when they are. `COMPLETER_CPU_FEATURES=avx2 make test` runs the suite on the build an
# AVX2 machine gets (models/cpu_flags.py), compiled once into the cache beside this
# machine's, and a plain `make test` on this machine's again.
llama: $(INSTALLED)
	$(BIN)/python -m completer.models.llama_build

# One compile of llama.cpp (models/llama_build.py): the library the bindings load,
# llama-server and ggml-rpc-server, for the accelerator this machine has (COMPLETER_GPU
# overrides; see models/accelerator.py) and this CPU without AMX (models/cpu_flags.py),
# into the cache, where later installs on this machine find it. llama-cpp-python itself
# installs without compiling llama.cpp (LLAMA_BUILD=OFF) and loads that build.
# The project goes in first without its dependencies (seconds), so that the compile (CPU,
# minutes) runs while pip downloads and installs them (network); both read the one
# download of llama-cpp-python's source (`fetch`, into the cache).
# --no-cache-dir: pip's wheel cache would hand back a llama-cpp-python built otherwise.
PIP := $(BIN)/pip install --quiet --disable-pip-version-check
$(INSTALLED): pyproject.toml models/accelerator.py models/cpu_flags.py models/llama_build.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) --no-deps -e .
	$(BIN)/python -m completer.models.llama_build fetch > $(VENV)/llama-cpp-python-sdist
	$(BIN)/python -m completer.models.llama_build compile & compiling=$$!; \
	CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" $(PIP) --no-cache-dir \
		"$$(cat $(VENV)/llama-cpp-python-sdist)" -e '.[test]'; installed=$$?; \
	wait $$compiling && [ $$installed = 0 ]
	$(BIN)/python -m completer.models.llama_build
	touch $@

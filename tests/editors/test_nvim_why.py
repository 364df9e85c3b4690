""":CompleterWhy (editor-extensions/nvim/lua/completer/why.lua) in a real headless Neovim 0.11.4
against the real server with the smol models: after a completion in shop/orders.py, whose
call needs what two other files define (tests/shop_repository.py), a scratch markdown
buffer holds each other file the prompt showed as "path — why", in the prompt's order,
then the prompt itself, fenced; before any completion, a message instead.

tests/editors/nvim/plugin_why.lua records the buffer and the server's own completer/prompt
answer; the expected lines are this file's reading of the view.
"""

import re

import pytest

from completer.lsp import protocol
from shop_repository import CALL, write_shop
from test_nvim_plugin import INFO, MODULE, checks, run_nvim

ORDERS = "from shop.client import connect\n\n\ndef latest_orders(host: str) -> bytes:\n" + CALL


@pytest.fixture(scope="module")
def session(smol, smol_cache, tmp_path_factory) -> dict:
    """One Neovim session through tests/editors/nvim/plugin_why.lua, in the shop repository
    (a git work tree: the plugin's root marker)."""
    tmp = tmp_path_factory.mktemp("nvim-why")
    workspace = tmp / "project"  # run_nvim's WORKSPACE
    (workspace / ".git").mkdir(parents=True)
    write_shop(workspace, ORDERS)
    answer = run_nvim("plugin_why.lua", tmp, smol_cache, timeout_s=300)
    assert "error" not in answer, answer.get("error")
    return answer


def expected_view(path: str, answer: dict) -> list[str]:
    """The view's lines for the server's answer about the file at `path`."""
    longest = max((len(run) for run in re.findall(r"`+", answer["prompt"])), default=0)
    fence = "`" * max(3, longest + 1)
    sections = [f"- {section['path']} — {section['why']}" for section in answer["sections"]]
    said = ["The other files the prompt of its last completion showed, in the prompt's order, and why:", "",
            *sections] if sections else ["The prompt of its last completion showed no other file."]
    return [f"# Why this suggestion: {path}", "", *said, "", "## The prompt, as the model read it", "", fence,
            *answer["prompt"].split("\n"), fence]


@pytest.mark.slow  # a real Neovim, the smol pair
def test_why_shows_the_other_files_and_the_prompt_of_the_last_completion(session):
    answer = checks(session, "after")["after"]["answer"]
    assert [section["path"] for section in answer["sections"]] == ["shop/client.py", "shop/transport.py"]
    assert "max_staleness_s: int = 30" in answer["prompt"]  # what the call needs, from two imports away
    view = session["checks"]["after"]["view"]
    assert view["lines"] == expected_view("shop/orders.py", answer)
    assert "- shop/transport.py — Transport.fetch line 10: same name" in view["lines"]
    assert {key: view[key] for key in ("buftype", "filetype", "modifiable", "current", "windows")} == {
        "buftype": "nofile", "filetype": "markdown", "modifiable": False, "current": True, "windows": 2}


@pytest.mark.slow
def test_why_before_any_completion_says_so_and_opens_nothing(session):
    assert checks(session, "before")["before"] == {
        "notifications": [{"message": "completer: no completion has been decoded in this document yet",
                           "level": INFO}],
        "why_buffer": None}


@pytest.mark.slow
def test_why_asked_again_shows_the_same_buffer_in_its_window(session):
    again = checks(session, "again")["again"]
    assert again["same_buffer"] and again["view"] == session["checks"]["after"]["view"]


@pytest.mark.slow
def test_a_prompt_holding_backticks_gets_a_longer_fence(session):
    found = checks(session, "backticks")["backticks"]
    assert "```" in found["answer"]["prompt"] and found["lines"] == expected_view("readme.py", found["answer"])
    assert found["lines"][-1] == "````" and found["lines"][2] == "The prompt of its last completion showed no other file."


@pytest.mark.slow
def test_the_session_raised_no_error(session):
    assert session["errmsg"] == ""
    assert not re.search(r"E\d+:|Error|stack traceback", session["messages"]), session["messages"]


def test_the_plugin_asks_why_by_the_servers_protocol_name():
    assert re.search(r'^local PROMPT = "(.*)"$', MODULE.read_text(), re.MULTILINE).group(1) == protocol.PROMPT

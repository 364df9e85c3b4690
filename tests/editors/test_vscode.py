"""The VS Code extension: its manifest and protocol module agree with the server, and
the packaged .vsix gives a real inline suggestion in a real VS Code (code-server) in
headless Chromium, accepted with Tab; a real next edit, shown as decorations, jumped to
and applied with Tab, undone in one step and counted by the server; a settings change
reaches the server, and its model load error shows as a notification. The workspace is a hostile one: its checked-in
.vscode/settings.json names another host (a listener on 127.0.0.1) as the team server,
the RPC server and where the key goes, and programs of its own to launch; nothing
connects there and nothing of it runs, while its other settings still apply.
`editor-extensions/vscode/scripts/build.sh` (run by `make test` first) builds the .vsix
and installs the toolchain."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from completer.config import RENAMED, machine_options, setting_name, settings_schema
from completer.lsp import protocol
from listener import Listener
from lsp_session import NEXT_EDIT
from lsp_session import RENAMED as PARAMETER_RENAMED

EXTENSION = Path(__file__).resolve().parents[2] / "editor-extensions" / "vscode"
MANIFEST = json.loads((EXTENSION / "package.json").read_text())
SETTINGS = MANIFEST["contributes"]["configuration"]["properties"]
ARTIFACTS = EXTENSION / "e2e-artifacts"  # where the screenshots stay for people to look at

# The sample file `make demo` completes: the test types its last line's `return math.` itself.
EXAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "stats.py").read_text()
TYPED = "return math."

# The next edit, on test_lsp_next_edit's text: the test types the start of a parameter's
# rename into the definition, where smol suggests edits (the same ones every run: plain decoding).
EDIT_FILE = "shapes.py"
EDIT_BEFORE = PARAMETER_RENAMED.replace("area(w,", "area(width,")
EDIT_AT = (3, len("def area("))  # line, character: 0-based
EDIT_TYPED = "w, "
EDIT_AFTER = PARAMETER_RENAMED.replace("area(w,", "area(w, width,")


def test_every_server_option_is_a_setting_with_the_servers_default_and_description():
    declared = {key.removeprefix("completer."): schema for key, schema in SETTINGS.items() if key.count(".") == 2}
    assert declared == settings_schema(), "run editor-extensions/vscode/scripts/sync-settings.py"


def test_the_protocol_module_matches_the_servers():
    source = (EXTENSION / "src" / "protocol.ts").read_text()
    constants = dict(re.findall(r'export const (\w+) = "([^"]*)";', source))
    names = ("SERVER_NAME", "STATS", "PROMPT", "WARM", "ACCEPT_COMMAND", "DID_SHOW_COMPLETION", "INLINE_EDIT",
             "DID_SHOW_INLINE_EDIT", "ACCEPT_EDIT_COMMAND", "REJECT_EDIT_COMMAND", "INLINE_EDIT_CAPABILITY",
             "CLIENT_OPTIONS", "SEVERAL_EDITS_OPTION", "SETTINGS_SECTION")
    assert constants == {name: getattr(protocol, name) for name in names}
    stats_interface = source[source.index("interface Stats"):]
    assert tuple(re.findall(r"^  (\w+): ", stats_interface, re.MULTILINE)) == protocol.STATS_KEYS


def test_the_extension_knows_each_renamed_option_under_its_old_and_new_setting():
    source = (EXTENSION / "src" / "settings.ts").read_text()
    table = source[source.index("RENAMED: Readonly"):]
    renamed = dict(re.findall(r'"([\w.]+)": "([\w.]+)"', table[: table.index("};")]))
    assert renamed == {setting_name(old): setting_name(new) for old, new in RENAMED.items()}


def test_the_extension_passes_the_servers_machine_level_options_as_its_flags():
    source = (EXTENSION / "src" / "settings.ts").read_text()
    table = source[source.index("MACHINE_FLAGS"):source.index("};")]
    flags = dict(re.findall(r'"([\w.]+)": "(--[\w-]+)"', table))
    assert flags == {setting_name(name): flag for name, flag in machine_options().items()}
    machine = {key for key, schema in SETTINGS.items() if schema.get("scope") == "machine"}
    old_names = {f"completer.{setting_name(old)}" for old, new in RENAMED.items() if new in machine_options()}
    assert machine == {f"completer.{key}" for key in flags} | {"completer.command", "completer.pythonPath"} | old_names
    assert "completer.models.backend" in old_names  # models.decoder's: a workspace may not choose it by that name


def test_every_command_is_registered_and_every_contributed_command_exists():
    source = (EXTENSION / "src" / "extension.ts").read_text()
    registered = set(re.findall(r'registerCommand\("([\w.]+)"', source))
    assert registered == {command["command"] for command in MANIFEST["contributes"]["commands"]}


def test_tab_and_escape_are_the_next_edits_only_while_one_shows_and_no_inline_suggestion_does():
    source = (EXTENSION / "src" / "nextEditController.ts").read_text()
    context_keys = set(re.findall(r'^const \w+ = "(completer\.\w+)";', source, re.MULTILINE))
    assert context_keys == {"completer.nextEditVisible", "completer.nextEditAtCursor"}
    ours = [binding for binding in MANIFEST["contributes"]["keybindings"] if binding["key"] in ("tab", "escape")]
    assert {binding["command"] for binding in ours} == {"completer.jumpToNextEdit", "completer.acceptNextEdit",
                                                        "completer.dismissNextEdit"}
    for binding in ours:
        assert "completer.nextEditVisible" in binding["when"] and "!inlineSuggestionVisible" in binding["when"]
        assert set(re.findall(r"completer\.\w+", binding["when"])) <= context_keys


# Stands for GITHUB_TOKEN, which code-server takes out of its extensions' environment.
SECRET_VARIABLE = "COMPLETER_E2E_TOKEN"


def hostile_workspace(workspace: Path, elsewhere: Listener) -> None:
    """A checked-in .vscode/settings.json that sends the code and the user's token to
    `elsewhere` and launches programs of its own (each would leave a `.ran` file), beside
    a setting a workspace may set, with a bad value the server names in a notification."""
    for name in ("command", "python"):
        program = workspace / "tools" / name
        program.parent.mkdir(exist_ok=True)
        program.write_text('#!/bin/sh\ntouch "$0.ran"\n')
        program.chmod(0o755)
    settings = {"completer.models.decoder": "llama-server", "completer.models.backend": "openai",
                "completer.models.serverUrl": elsewhere.url,
                "completer.models.apiKeyEnv": SECRET_VARIABLE, "completer.models.rpcServers": elsewhere.address,
                "completer.models.target": "tools/model.gguf", "completer.command": str(workspace / "tools/command"),
                "completer.pythonPath": str(workspace / "tools/python"), "completer.prompt.chunks": "many"}
    (workspace / ".vscode").mkdir()
    (workspace / ".vscode" / "settings.json").write_text(json.dumps(settings, indent=2))


@pytest.mark.slow  # a real VS Code in headless Chromium
def test_a_real_vscode_shows_the_servers_suggestion_and_tab_accepts_it(smol, smol_cache, tmp_path):
    toolchain_file = EXTENSION / ".toolchain.json"
    assert toolchain_file.exists(), "build the extension first: editor-extensions/vscode/scripts/build.sh"
    toolchain = json.loads(toolchain_file.read_text())
    workspace = tmp_path / "project"
    workspace.mkdir()
    assert EXAMPLE.rstrip("\n").endswith(TYPED), "examples/stats.py no longer ends where the test types"
    before = EXAMPLE.rstrip("\n").removesuffix(TYPED)
    (workspace / "stats.py").write_text(before)
    (workspace / EDIT_FILE).write_text(EDIT_BEFORE)
    # Plain decoding: smol's next edit here is then the same every run (batched verification's
    # near-tie flips made it vary, once to an edit with nothing to draw).
    options = {"models.preset": "smol", "generation.maxTokens": 16, "generation.timeBudgetMs": 0,
               setting_name("generation.draft_mode"): "target", setting_name("generation.candidates"): 3,
               **{setting_name(f"edits.{key}"): value for key, value in NEXT_EDIT["edits"].items()}}
    env = {**os.environ, "CODE_SERVER": toolchain["code_server"], "VSIX": str(EXTENSION / "completer.vsix"),
           "COMPLETER": str(Path(sys.executable).with_name("completer")), "WORKSPACE": str(workspace),
           "FILE": "stats.py", "TYPED": TYPED, "EDIT_FILE": EDIT_FILE, "EDIT_AT": "%d:%d" % EDIT_AT,
           "EDIT_TYPED": EDIT_TYPED, "ARTIFACTS": str(ARTIFACTS), "SERVER_OPTIONS": json.dumps(options),
           "WORKSPACE_NOTICE": "prompt.chunks = 'many'", SECRET_VARIABLE: "not-for-elsewhere",
           "COMPLETER_CACHE_DIR": str(smol_cache), "HOME": str(tmp_path / "home")}
    (ARTIFACTS / "result.json").unlink(missing_ok=True)
    with Listener() as elsewhere:
        hostile_workspace(workspace, elsewhere)
        run = subprocess.run([toolchain["node"], str(EXTENSION / "e2e" / "run.mjs")], env=env, cwd=EXTENSION,
                             capture_output=True, text=True, timeout=900)
    # Nothing went to the host the workspace named, and none of its programs ran...
    assert not list(workspace.glob("tools/*.ran")), run.stderr[-4000:]
    assert elsewhere.accepted == 0, elsewhere.received
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads((ARTIFACTS / "result.json").read_text())
    # ... though its settings were read: its bad prompt.chunks reached the server.
    assert "prompt.chunks = 'many' is not a non-negative int" in result["workspace_notice"]

    shown = "".join(result["shown"])
    assert shown.strip(), result
    assert (ARTIFACTS / "vscode-inline-suggestion.png").stat().st_size > 10_000
    # Alt+] showed another of the server's candidates, Alt+[ the first again, which Tab took.
    assert result["candidates"]["next"] and result["candidates"]["back"] == result["shown"], result["candidates"]
    assert (ARTIFACTS / "vscode-candidates.png").stat().st_size > 10_000
    # Tab put exactly the ghost text after what was typed.
    written = result["after"]
    assert written.startswith(before + TYPED)
    inserted = written[len(before + TYPED):]
    assert re.sub(r"\s", "", inserted) == re.sub(r"\s", "", shown)
    # The status bar shows the live acceptance rate and speed once completions ran.
    assert re.fullmatch(r"\s*\d+% · \d+ tok/s", result["status"]), result["status"]
    # Turned off for python: nothing shows as the user types; on again, a suggestion does.
    assert result["paused"] == {"shown_while_off": 0, "shown_when_on": True}
    check_next_edit(result["next_edit"])
    # The suggest widget is VS Code's own: none of the server's items in it, and over the
    # start of a word the file holds, Tab took the widget's item, not the ghost text.
    widget = result["suggest_widget"]
    assert widget["items"] and not any("completer" in item for item in widget["items"]), widget
    assert widget["focused"] == widget["line"].strip() == "standard_deviation", widget
    # A model setting changed in VS Code reached the server, whose load error (with the
    # fix) became a notification.
    assert "model file not found: /nonexistent/model.gguf" in result["notification"]
    assert "completer models pull" in result["notification"]


def check_next_edit(run: dict) -> None:
    """The next-edit part of the run: the suggestion the server sent (as the extension logged
    it) showed as decorations, Tab from elsewhere went to it without changing the text, Tab
    applied exactly its edits, one undo took all of them back, and the server counted each
    suggestion shown, the one accepted and the one dismissed."""
    assert run["typed_text"] == EDIT_AFTER
    suggestion = run["suggestion"]
    edits = suggestion["edits"]
    assert suggestion["uri"].endswith("/" + EDIT_FILE) and edits, suggestion
    assert (ARTIFACTS / "vscode-next-edit.png").stat().st_size > 10_000
    # The text each edit removes, struck through; the first line of each new text as ghost text.
    removed = "".join(EDIT_AFTER[offset(EDIT_AFTER, edit["range"]["start"]):offset(EDIT_AFTER, edit["range"]["end"])]
                      for edit in edits)
    assert re.sub(r"\s", "", "".join(run["decorations"]["struck"])) == re.sub(r"\s", "", removed), run["decorations"]
    # An edit of blank text alone (blank lines deleted) shows a label, as nothing of it would show.
    blank = [not edit["text"].strip() and not EDIT_AFTER[offset(EDIT_AFTER, edit["range"]["start"]):offset(
        EDIT_AFTER, edit["range"]["end"])].strip() for edit in edits]
    ghosts = run["decorations"]["ghost"]
    labels = [ghost for ghost in ghosts if re.fullmatch(r"[⌫↵] \d+ blank lines?|␣ whitespace", ghost)]
    assert len(labels) == sum(blank), run["decorations"]
    assert len(ghosts) - len(labels) == sum(bool(edit["text"]) for edit, only_blank in zip(edits, blank)
                                            if not only_blank), run["decorations"]
    assert all(any(ghost.removesuffix("…").strip() in edit["text"] for edit in edits)
               for ghost in ghosts if ghost not in labels), ghosts
    # Tab away from the edits went to the first one and changed nothing...
    start = edits[0]["range"]["start"]
    assert run["cursor_after_jump"] == f"Ln {start['line'] + 1}, Col {start['character'] + 1}", run["cursor_away"]
    assert run["after_jump"] == EDIT_AFTER
    # ... Tab there applied all the server's edits, and one undo took them all back.
    assert run["applied"] == apply_edits(EDIT_AFTER, edits)
    assert run["undone"] == EDIT_AFTER
    if run["dismissed"]["count"]:
        assert run["dismissed"]["decorations_after"] == {"struck": [], "ghost": []}
    counts = re.search(r"next edits: (\d+) shown, (\d+) accepted, (\d+) dismissed", run["statistics"])
    assert counts, run["statistics"]
    assert tuple(map(int, counts.groups())) == (run["shown_total"], 1, run["dismissed"]["count"])


def offset(text: str, position: dict) -> int:
    """The offset of an LSP position (UTF-16 characters: Python's, in these ASCII texts)."""
    lines = text.split("\n")
    return sum(len(line) + 1 for line in lines[:position["line"]]) + position["character"]


def apply_edits(text: str, edits: list[dict]) -> str:
    for edit in sorted(edits, key=lambda edit: offset(text, edit["range"]["start"]), reverse=True):
        text = text[:offset(text, edit["range"]["start"])] + edit["text"] + text[offset(text, edit["range"]["end"]):]
    return text

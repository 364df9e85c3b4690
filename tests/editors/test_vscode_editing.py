"""Editing through a real VS Code (code-server in headless Chromium, the packaged .vsix, the
real server on smol) where an editor's text is easy to get wrong: CRLF and mixed line
breaks, tab indentation, emoji and CJK before the cursor, a macro typing ahead of the
server, a pasted block, undo right after Tab, documents closed with requests in flight,
and a switch of documents while a next edit shows. Nothing wrong is shown or applied:
Tab inserts exactly the server's answer for the text it was asked on, at the cursor, in
the file's line breaks; and the server keeps no session of a closed document.
editor-extensions/vscode/e2e/editing.mjs drives the editor and records; this checks."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from completer.config import setting_name
from lsp_session import NEXT_EDIT
from test_vscode import ARTIFACTS, EDIT_AFTER, EDIT_AT, EDIT_BEFORE, EDIT_FILE, EDIT_TYPED, EXTENSION

STATS = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    m = mean(values)\n    "
# Each step's file (what is typed goes at its end) and what is typed; smol's plain-decoded
# answers there are multi-line where the step needs it.
FILES = {
    # The suggestion after "," ends in mid-list, so the one after it has more to say.
    "crlf.py": "SQUARES = [\r\n    1,\r\n    4,\r\n    9,\r\n    16,\r\n    25",
    # Mostly CRLF: VS Code makes every line break CRLF as it opens it.
    "mixed.py": "import math\r\nimport os\n\r\n\r\nclass Point:\r\n    def __init__(self, x, y)",
    "tabs.py": "import math\n\n\nclass Point:\n\tdef __init__(self, x, y)",
    "unicode.py": 'def greet(name):\n    print("👋 你好", name, se',
    "macro.py": STATS,
    "paste.py": "import math\n\n\n",
    "undo.py": STATS + "return sum",
    "closed1.py": STATS,
    "closed2.py": STATS,
    "closed3.py": STATS,
    "other.py": "def other():\n    return 1\n",
    EDIT_FILE: EDIT_BEFORE,
}
PASTED = "def median(values):\n    ordered = sorted(values)\n    middle = len(ordered) // 2\n    if len(ordered) % 2"
STEPS = {
    "crlf": {"file": "crlf.py", "typed": ","},
    "mixed": {"file": "mixed.py", "typed": ":"},
    "tabs": {"file": "tabs.py", "typed": ":", "next_line": "self.n"},
    "unicode": {"file": "unicode.py", "typed": "p"},
    "macro": {"file": "macro.py", "bursts": ["return ", "sum("]},
    "paste": {"file": "paste.py", "block": PASTED, "typed": ":"},
    "undo": {"file": "undo.py", "typed": "("},
    # Closed at once, as the suggestion shows (its prefetch runs), and as the next edit is computed.
    "closing": {"files": [{"file": "closed1.py", "close_ms": None}, {"file": "closed2.py", "close_ms": 0},
                          {"file": "closed3.py", "close_ms": 1000}], "typed": "total = "},
    "switching": {"file": EDIT_FILE, "at": EDIT_AT, "typed": EDIT_TYPED, "other": "other.py"},
}

# Tabs on inline suggestions: two in crlf.py, two in tabs.py, one in each of mixed, unicode,
# macro, paste and undo.
ACCEPTED = 9


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def end_of(text: str) -> dict:
    """The LSP position (UTF-16) at the end of `text`."""
    lines = re.split(r"\r\n|\r|\n", text)
    return {"line": len(lines) - 1, "character": utf16(lines[-1])}


def squeezed(text: str) -> str:
    """Without whitespace: the screen shows tabs as spaces and leaves out empty lines."""
    return re.sub(r"\s", "", text)


def answer_at(answers: list[dict], name: str, position: dict) -> dict:
    """The server's last answer for `name` at `position`, as the extension logged it."""
    found = [answer for answer in answers if answer["uri"].endswith("/" + name) and answer["position"] == position]
    assert found, (name, position, answers)
    return found[-1]


def check_tab(before: str, after: str, shown: dict, answers: list[dict], name: str) -> str:
    """Tab on the suggestion shown after `before` gave `after`: exactly the server's first item
    for `before` at its end (the cursor), which is what the screen showed. The text inserted."""
    assert after.startswith(before), (before, after)
    inserted = after[len(before):]
    answer = answer_at(answers, name, end_of(before))
    assert inserted == answer["items"][0]["text"], (inserted, answer)
    assert squeezed(inserted) == squeezed("".join(shown["lines"])), (inserted, shown)
    return inserted


def starts_at_cursor(shown: dict) -> bool:
    """The ghost text's first part is on the cursor's line, where the cursor is (pixels)."""
    return shown["left"] is not None and abs(shown["left"] - shown["cursor_left"]) < 3


def only_crlf(text: str) -> bool:
    return "\r\n" in text and not re.search(r"\r(?!\n)|(?<!\r)\n", text)


@pytest.mark.slow  # a real VS Code in headless Chromium
def test_editing_in_a_real_vscode_shows_and_applies_nothing_wrong(smol, smol_cache, tmp_path):
    toolchain_file = EXTENSION / ".toolchain.json"
    assert toolchain_file.exists(), "build the extension first: editor-extensions/vscode/scripts/build.sh"
    toolchain = json.loads(toolchain_file.read_text())
    workspace = tmp_path / "project"
    workspace.mkdir()
    for name, text in FILES.items():
        (workspace / name).write_bytes(text.encode())
    options = {"models.preset": "smol", "generation.maxTokens": 16, "generation.timeBudgetMs": 0,
               setting_name("generation.draft_mode"): "target",
               **{setting_name(f"edits.{key}"): value for key, value in NEXT_EDIT["edits"].items()}}
    env = {**os.environ, "CODE_SERVER": toolchain["code_server"], "VSIX": str(EXTENSION / "completer.vsix"),
           "COMPLETER": str(Path(sys.executable).with_name("completer")), "WORKSPACE": str(workspace),
           "ARTIFACTS": str(ARTIFACTS), "SERVER_OPTIONS": json.dumps(options), "EDITING": json.dumps(STEPS),
           "COMPLETER_CACHE_DIR": str(smol_cache), "HOME": str(tmp_path / "home")}
    (ARTIFACTS / "editing.json").unlink(missing_ok=True)
    run = subprocess.run([toolchain["node"], str(EXTENSION / "e2e" / "editing.mjs")], env=env, cwd=EXTENSION,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads((ARTIFACTS / "editing.json").read_text())

    check(result)


def check(result: dict) -> None:
    """editing.mjs's record (editing.json), step by step."""
    # Every answer starts at the cursor it was asked at, and none holds a broken character.
    for answer in result["answers"]:
        for item in answer["items"]:
            assert item["range"]["start"] == answer["position"] and "\ufffd" not in item["text"], answer
    check_switching(result["switching"])
    check_line_breaks(result["line_breaks"])
    check_tabs(result["tabs"])

    # Emoji and CJK before the cursor: the suggestion is asked for, shown and inserted at the
    # cursor, counted in UTF-16 (which the emoji makes differ from code points).
    unicode = result["unicode"]
    typed = unicode["before"] + unicode["typed"]
    assert end_of(typed)["character"] != len(typed.split("\n")[-1])
    check_tab(typed, unicode["after"], unicode["shown"], unicode["answers"], "unicode.py")
    assert starts_at_cursor(unicode["shown"]), unicode["shown"]

    check_macro(result["macro"])

    # Paste: the block went in as it was, and the suggestion after it goes in after it.
    paste = result["paste"]
    assert paste["pasted"] == paste["original"] + PASTED
    check_tab(paste["pasted"] + paste["typed"], paste["after"], paste["shown"], paste["answers"], "paste.py")

    check_undo(result["undo"])
    # Every document closed, three with requests in flight: nothing of them stays in the server.
    stats = result["stats"]
    assert (stats["sessions"], stats["saved_kv_mb"], stats["drafting_documents"], stats["tuned_documents"]) == \
        (0, 0, 0, 0), stats
    # The server counted each Tab above as an acceptance (its item's command ran), and no next edit applied.
    assert (stats["suggestions_accepted"], stats["edits_accepted"]) == (ACCEPTED, 0), stats


def check_line_breaks(line_breaks: dict) -> None:
    """CRLF: the multi-line suggestion went in with CRLF line breaks only, as the file has;
    the one asked for right after it too, which the server had computed while the first
    showed (VS Code asks as the first goes in: the prefetch serves that request). Mixed:
    VS Code made the file CRLF as it opened it; the suggestion went in as CRLF."""
    crlf = line_breaks["crlf"]
    assert crlf["eol"] == "CRLF"
    inserted = check_tab(crlf["before"] + crlf["typed"], crlf["after"], crlf["shown"], crlf["answers"], "crlf.py")
    assert "\r\n" in inserted and only_crlf(crlf["after"]), crlf
    second = crlf["second"]
    check_tab(crlf["after"], second["after"], second["shown"], second["answers"], "crlf.py")
    assert only_crlf(second["after"]), second
    stats = crlf["stats"]
    assert stats["after"]["prefetch_hits"] > stats["before"]["prefetch_hits"], stats
    mixed = line_breaks["mixed"]
    assert mixed["eol"] == "CRLF"
    before = re.sub(r"\r?\n", "\r\n", mixed["before"]) + mixed["typed"]
    inserted = check_tab(before, mixed["after"], mixed["shown"], mixed["answers"], "mixed.py")
    assert "\r\n" in inserted and only_crlf(mixed["after"]), mixed


def check_tabs(tabs: dict) -> None:
    """The multi-line suggestion's indentation stays tabs; on a new line (VS Code indents it
    with tabs) the suggestion shows at the cursor, after the tabs, and goes in there."""
    assert tabs["indentation"].startswith("Tab Size"), tabs["indentation"]
    multi = tabs["multi_line"]
    inserted = check_tab(multi["before"] + multi["typed"], multi["after"], multi["shown"], multi["answers"], "tabs.py")
    assert "\n\t" in inserted and not re.search(r"\n +", inserted), inserted
    in_line = tabs["in_line"]
    assert in_line["after"].startswith(multi["after"]), in_line
    new_line = re.match(r"\n\t+" + re.escape(STEPS["tabs"]["next_line"]), in_line["after"][len(multi["after"]):])
    assert new_line, in_line["after"]
    check_tab(multi["after"] + new_line.group(), in_line["after"], in_line["shown"], in_line["answers"], "tabs.py")
    assert starts_at_cursor(in_line["shown"]), in_line["shown"]


def check_undo(undo: dict) -> None:
    """Undo right after Tab: the text as before it, on screen and on disk; a suggestion shown
    again is the server's answer for that text, at its cursor."""
    typed = undo["before"] + undo["typed"]
    shown = answer_at(undo["answers"], "undo.py", end_of(typed))["items"][0]["text"]
    assert squeezed(shown) == squeezed("".join(undo["shown"]["lines"])) != ""
    assert undo["accepted"] == typed + shown, undo
    assert undo["undone_on_screen"] == typed and undo["undone"] == typed, undo
    if undo["again"]["lines"]:
        again = answer_at(undo["answers_after"], "undo.py", end_of(typed))
        assert squeezed(again["items"][0]["text"]) == squeezed("".join(undo["again"]["lines"])), undo


def check_macro(macro: dict) -> None:
    """Keys typed in bursts with no delay and Tab the moment a suggestion showed: the line is
    what was typed, then the rest of one of the server's answers, asked after some of the
    keys: the keys typed since it are its start (typed through), and Tab inserted the rest.
    What the screen showed is in it (the screen may have drawn only some of its lines yet)."""
    typed = macro["before"] + macro["typed"]
    assert macro["after"].startswith(typed), macro
    inserted = macro["after"][len(typed):]
    assert inserted and all(line.strip() in inserted for line in macro["shown"]["lines"]), macro
    end = end_of(typed)
    first = end["character"] - len(macro["typed"])
    line = typed.split("\n")[-1]
    consistent = [answer for answer in macro["answers"] if answer["uri"].endswith("/macro.py")
                  and answer["position"]["line"] == end["line"] and first <= answer["position"]["character"]
                  and any(item["text"] == line[answer["position"]["character"]:] + inserted
                          for item in answer["items"])]
    assert consistent, macro


def check_switching(switching: dict) -> None:
    """A next edit showed in EDIT_FILE; in the other file no decoration showed and Tab only
    indented, and nothing of the edit was applied; back in EDIT_FILE, what shows (if
    anything) is a suggestion made since."""
    assert switching["typed_text"] == EDIT_AFTER
    assert switching["shown"] and switching["shown"][-1]["uri"].endswith("/" + EDIT_FILE), switching["shown"]
    assert switching["on_screen"]["struck"] or switching["on_screen"]["ghost"], switching["on_screen"]
    assert switching["in_other"] == [], switching["in_other"]
    assert switching["other_after"] == switching["other_before"] + "    "
    assert switching["file_after"] == EDIT_AFTER and switching["accepted"] == 0
    assert not switching["back"] or switching["shown_after"], switching

"""Latency as the editor shows it, in real editors with the real server: keystroke to ghost
text over a scripted typing session, and Tab to the next suggestion, with lsp.prefetch on
and off, in headless Neovim with the plugin and in VS Code (code-server in headless
Chromium, with the built .vsix: editor-extensions/vscode/scripts/build.sh first).

    python -m benchmarks.editor_latency [--editors neovim vscode] [--file colorsys.py] [--lines 12]
        [--holes 10] [--preset smol]

Algorithm (benchmarks/nvim_latency.lua and editor-extensions/vscode/e2e/latency.mjs type
and time, in the editor):
    the file: a standard-library module no test or bench here types (colorsys.py); the
        session types `lines` of its lines after the first third (a character a key,
        indentation included, with the editors' indenting off), every key 150-250 ms after
        the last (uniform, seeded), and a 1 s pause after each line; the document before
        them is the file up to there
    per key: the time from the key reaching the editor (Neovim: vim.on_key; VS Code: a
        capturing keydown listener in the page) to ghost text showing (Neovim: the plugin
        setting its extmark at the cursor; VS Code: a MutationObserver seeing the editor's
        ghost text change to a non-empty text), if that came before the next key; a key
        whose suggestion the next key overtook is counted apart, and so is a new suggestion
        apart from the shown one moved along as the user types what it says (Neovim: the
        extmark set anew, not updated; VS Code: no ghost text showed when the key came)
    Tab to next: `holes` documents cut after whole lines spread over the same file; at
        each, wait for the ghost text (Neovim: entering Insert mode at the end asks; VS
        Code: the document's last character typed asks), read it 1 s, press Tab, time to
        the next ghost text (Neovim: within 30 s; VS Code: within 5 s)
    one editor (and server) per case, lsp.prefetch on and off, so that neither finds
        the other's caches; options
        {"models": {"preset": P}, "generation": {"max_tokens": 16, "time_budget_ms": 0}}
Reports p50 / p95 / p99 of each, beside Zed's 300 ms budget for a keystroke.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ZED_BUDGET_MS = 300  # Zed's edit prediction budget for a keystroke


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def session(text: str, lines: int, holes: int) -> tuple[str, str, list[str]]:
    """(the document before the typing, the text typed, the Tab holes)."""
    all_lines = text.split("\n")
    start = len(all_lines) // 3
    while not all_lines[start].strip():
        start += 1
    prefix = "\n".join(all_lines[:start])
    typed = "\n" + "\n".join(all_lines[start:start + lines])
    code = [i for i, line in enumerate(all_lines) if line.strip() and i > 10]
    cuts = [code[(2 * n + 1) * len(code) // (2 * holes)] for n in range(holes)]
    return prefix, typed, ["\n".join(all_lines[:i + 1]) for i in cuts]


def options(preset: str, prefetch: bool) -> dict:
    return {"models": {"preset": preset}, "generation": {"max_tokens": 16, "time_budget_ms": 0},
            "lsp": {"prefetch": prefetch}}


def run_neovim(prefetch: bool, prefix: str, typed: str, holes: list[str], preset: str, seed: int) -> dict:
    """The Neovim session's keystroke latencies (ms or None where none showed, and whether
    a new suggestion) and Tab latencies."""
    rng = random.Random(seed)
    nvim = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        (Path(tmp) / "project").mkdir()
        env = {**os.environ, "HARNESS": str(REPO / "tests" / "nvim" / "harness.lua"),
               "PLUGIN": str(REPO / "editor-extensions" / "nvim"),
               "COMPLETER": str(Path(sys.executable).with_name("completer")), "WORKSPACE": str(Path(tmp) / "project"),
               "RESULT": str(result), "TIMEOUT_MS": str(1_500_000), "PREFIX": prefix, "TYPED": typed,
               "INTERVALS": json.dumps([rng.uniform(150, 250) for _ in typed]), "PAUSE_MS": "1000",
               "HOLES": json.dumps(holes), "READ_MS": "1000", "OPTIONS": json.dumps(options(preset, prefetch)),
               **{f"XDG_{name}_HOME": str(Path(tmp) / name.lower()) for name in ("STATE", "CONFIG", "DATA", "CACHE")}}
        subprocess.run([nvim, "--clean", "--headless", "-S", str(REPO / "benchmarks" / "nvim_latency.lua")],
                       env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1600)
        answer = json.loads(result.read_text())
    if answer.get("error"):
        raise SystemExit(f"the Neovim session failed: {answer['error']}")
    found = answer["checks"]
    if not found["typed_text_matches"]:
        raise SystemExit("Neovim's buffer is not the file's text: the session did not type as scripted")
    return {"keys": [(key["ms"], not key["kept"]) for key in found["typing"]], "tabs": found["tab"]}


def setting_name(group: str, key: str) -> str:
    """A server option as VS Code's setting names it under completer.: generation.maxTokens."""
    first, *rest = key.split("_")
    return f"{group}.{first}{''.join(word.title() for word in rest)}"


def run_vscode(prefetch: bool, prefix: str, typed: str, holes: list[str], preset: str, seed: int) -> dict:
    """The same in VS Code, from the page's own times of keys and ghost text changes."""
    rng = random.Random(seed)
    extension = REPO / "editor-extensions" / "vscode"
    toolchain = json.loads((extension / ".toolchain.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "project"
        workspace.mkdir()
        (workspace / "session.py").write_text(prefix)
        names = [f"hole{n}.py" for n in range(len(holes))]
        for name, document in zip(names, holes):
            (workspace / name).write_text(document[:-1])  # the session types the last character
        result = Path(tmp) / "result.json"
        settings = {setting_name(group, key): value
                    for group, values in options(preset, prefetch).items() for key, value in values.items()}
        env = {**os.environ, "CODE_SERVER": toolchain["code_server"], "VSIX": str(extension / "completer.vsix"),
               "COMPLETER": str(Path(sys.executable).with_name("completer")), "WORKSPACE": str(workspace),
               "FILE": "session.py", "TYPED": typed, "INTERVALS": json.dumps([rng.uniform(150, 250) for _ in typed]),
               "PAUSE_MS": "1000", "HOLES": json.dumps(names), "READ_MS": "1000",
               "HOLE_ENDS": json.dumps({name: document[-1] for name, document in zip(names, holes)}),
               "SERVER_OPTIONS": json.dumps(settings), "RESULT": str(result), "HOME": str(Path(tmp) / "home")}
        run = subprocess.run([toolchain["node"], str(extension / "e2e" / "latency.mjs")], env=env, cwd=extension,
                             capture_output=True, text=True, timeout=1600)
        if run.returncode != 0:
            raise SystemExit(f"the VS Code session failed:\n{run.stderr[-3000:]}")
        found = json.loads(result.read_text())
        if (workspace / "session.py").read_text() != prefix + typed:
            raise SystemExit("VS Code's file is not the file's text: the session did not type as scripted")
    keys, ghosts = found["keys"], found["ghosts"]
    latencies = []
    for i, key in enumerate(keys):
        before = [ghost["text"] for ghost in ghosts if ghost["at"] < key]
        following = keys[i + 1] if i + 1 < len(keys) else float("inf")
        shown = next((ghost["at"] - key for ghost in ghosts if key <= ghost["at"] < following and ghost["text"]), None)
        latencies.append((shown, not (before and before[-1])))
    tabs = [next((ghost["at"] - tab["key"] for ghost in tab["ghosts"] if ghost["at"] >= tab["key"] and ghost["text"]),
                 None) for tab in found["tabs"]]
    return {"keys": latencies, "tabs": tabs}


def row(label: str, values: list[float], total: int) -> str:
    if not values:
        return f"| {label} | - | - | - | 0 of {total} |"
    return (f"| {label} | {statistics.median(values):.0f} ms | {percentile(values, 95):.0f} ms | "
            f"{percentile(values, 99):.0f} ms | {len(values)} of {total} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--editors", nargs="+", choices=("neovim", "vscode"), default=["neovim", "vscode"])
    parser.add_argument("--file", default="colorsys.py")
    parser.add_argument("--lines", type=int, default=12)
    parser.add_argument("--holes", type=int, default=10)
    parser.add_argument("--preset", default="smol")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    text = (Path(sysconfig.get_paths()["stdlib"]) / args.file).read_text()
    prefix, typed, holes = session(text, args.lines, args.holes)
    runners = {"neovim": run_neovim, "vscode": run_vscode}
    print(f"{args.file}: {len(typed)} keys typed at 150-250 ms (1 s after each line), {args.holes} Tab holes, "
          f"{args.preset}, 16 tokens")
    print("| in the editor | p50 | p95 | p99 | ghost text before the next key |")
    print("|---|---|---|---|---|")
    for editor in args.editors:
        cases = {name: runners[editor](name == "prefetch", prefix, typed, holes, args.preset, args.seed)
                 for name in ("prefetch", "no prefetch")}
        for name, found in cases.items():
            keystrokes = [ms for ms, _ in found["keys"] if ms is not None]
            asked = [ms for ms, new in found["keys"] if ms is not None and new]
            print(row(f"{editor}: keystroke to ghost text, {name}", keystrokes, len(found["keys"])))
            print(row(f"{editor}: of those, a new suggestion, {name}", asked, len(found["keys"])))
        for name, found in cases.items():
            tabs = [ms for ms in found["tabs"] if ms is not None]
            print(row(f"{editor}: Tab to the next suggestion, {name}", tabs, len(found["tabs"])))
    print(f"Zed's budget for a keystroke: {ZED_BUDGET_MS} ms")


if __name__ == "__main__":
    main()

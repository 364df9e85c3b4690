"""Latency as the editor shows it, in a real headless Neovim with the plugin and the real
server: keystroke to ghost text over a scripted typing session, and Tab to the next
suggestion, with server.prefetch on and off.

    python -m benchmarks.editor_latency [--file colorsys.py] [--lines 12] [--holes 10] [--preset smol]

Algorithm (benchmarks/nvim_latency.lua does the typing and the timing, in Neovim):
    the file: a standard-library module no test or bench here types (colorsys.py); the
        session types `lines` of its lines after the first third (a character a key,
        indentation included, with Neovim's indenting off), every key 150-250 ms after
        the last (uniform, seeded), and a 1 s pause after each line; the document before
        them is the file up to there
    per key: the time from the key reaching Neovim (vim.on_key) to the plugin setting
        its ghost text at the cursor (nvim_buf_set_extmark in its namespace), if that came
        before the next key; a key whose suggestion the next key overtook is counted apart,
        and so is a new suggestion (the model asked) apart from the shown one moved along
        as the user types what it says
    Tab to next: `holes` documents cut after whole lines spread over the same file; at
        each, wait for the ghost text, read it 1 s, press Tab, time to the next ghost text
    one Neovim (and server) per case, server.prefetch on and off, so that neither finds
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


def run(prefetch: bool, prefix: str, typed: str, holes: list[str], preset: str, seed: int) -> dict:
    rng = random.Random(seed)
    options = {"models": {"preset": preset}, "generation": {"max_tokens": 16, "time_budget_ms": 0},
               "server": {"prefetch": prefetch}}
    nvim = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        (Path(tmp) / "project").mkdir()
        env = {**os.environ, "HARNESS": str(REPO / "tests" / "nvim" / "harness.lua"),
               "PLUGIN": str(REPO / "editor-extensions" / "nvim"),
               "COMPLETER": str(Path(sys.executable).with_name("completer")), "WORKSPACE": str(Path(tmp) / "project"),
               "RESULT": str(result), "TIMEOUT_MS": str(1_500_000), "PREFIX": prefix, "TYPED": typed,
               "INTERVALS": json.dumps([rng.uniform(150, 250) for _ in typed]), "PAUSE_MS": "1000",
               "HOLES": json.dumps(holes), "READ_MS": "1000", "OPTIONS": json.dumps(options),
               **{f"XDG_{name}_HOME": str(Path(tmp) / name.lower()) for name in ("STATE", "CONFIG", "DATA", "CACHE")}}
        subprocess.run([nvim, "--clean", "--headless", "-S", str(REPO / "benchmarks" / "nvim_latency.lua")],
                       env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1600)
        answer = json.loads(result.read_text())
    if answer.get("error"):
        raise SystemExit(f"the Neovim session failed: {answer['error']}")
    return answer["checks"]


def row(label: str, values: list[float], total: int) -> str:
    if not values:
        return f"| {label} | - | - | - | 0 of {total} |"
    return (f"| {label} | {statistics.median(values):.0f} ms | {percentile(values, 95):.0f} ms | "
            f"{percentile(values, 99):.0f} ms | {len(values)} of {total} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", default="colorsys.py")
    parser.add_argument("--lines", type=int, default=12)
    parser.add_argument("--holes", type=int, default=10)
    parser.add_argument("--preset", default="smol")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    text = (Path(sysconfig.get_paths()["stdlib"]) / args.file).read_text()
    prefix, typed, holes = session(text, args.lines, args.holes)
    cases = {name: run(name == "prefetch", prefix, typed, holes, args.preset, args.seed)
             for name in ("prefetch", "no prefetch")}
    print(f"Neovim {args.file}: {len(typed)} keys typed at 150-250 ms (1 s after each line), {args.holes} Tab holes, "
          f"{args.preset}, 16 tokens")
    print("| in the editor | p50 | p95 | p99 | ghost text before the next key |")
    print("|---|---|---|---|---|")
    for name, found in cases.items():
        assert found["typed_text_matches"], "the buffer is not the file's text: the session did not type as scripted"
        keystrokes = [key["ms"] for key in found["typing"] if key["ms"] is not None]
        asked = [key["ms"] for key in found["typing"] if key["ms"] is not None and not key["kept"]]
        print(row(f"keystroke to ghost text, {name}", keystrokes, len(found["typing"])))
        print(row(f"of those, a new suggestion (not the shown one typed through), {name}", asked,
                  len(found["typing"])))
    for name, found in cases.items():
        tabs = [ms for ms in found["tab"] if ms is not None]
        print(row(f"Tab to the next suggestion, {name} ({found['stats']['prefetch_hits']} from the prefetch)", tabs,
                  len(found["tab"])))
    print(f"Zed's budget for a keystroke: {ZED_BUDGET_MS} ms")


if __name__ == "__main__":
    main()

"""Keystroke to completion, with the session's caches against cold, on stdlib files.

    python -m benchmarks.keystrokes [--files textwrap.py shlex.py] [--chars 7000] [--preset smol]

A thin wrapper over `completer.bench.keystrokes.replay` (what `completer bench --typing`
runs), on the first `chars` characters of standard library files: each file is opened
at a code line in its middle, that line is retyped a character per keystroke (a line
20 lines above deleted halfway), and the documents switch between files.
"""

import argparse
import json
import sysconfig
from pathlib import Path

from completer.bench.keystrokes import middle_code_line, replay
from completer.config import ModelOptions, PromptOptions
from completer.loading import load_pair
from completer.prompt import cursor_sections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", nargs="+", default=["textwrap.py", "shlex.py"])
    parser.add_argument("--chars", type=int, default=7000)
    parser.add_argument("--preset", default="smol")
    args = parser.parse_args()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    models = ModelOptions(preset=args.preset)
    pair = load_pair(models)
    target = pair.target
    texts = [(name, (stdlib / name).read_text()[: args.chars], "py") for name in args.files]
    for name, text, _ in texts:
        print(f"{name}: {len(target.tokenize(text))} tokens")
    summary, _ = replay(pair, models, texts)
    s = summary
    print(f"{s['keystrokes']} keystrokes, {s['forward_cache_hits']} answered by the forward cache")
    print("| keystroke to completion | p50 | p95 |")
    print("|---|---|---|")
    print(f"| every keystroke | {s['cached_p50_ms']:.0f} ms | {s['cached_p95_ms']:.0f} ms |")
    print(f"| keystrokes the model answered | {s['cached_model_p50_ms']:.0f} ms | {s['cached_model_p95_ms']:.0f} ms |")
    print(f"| cold (empty caches, same requests) | {s['cold_p50_ms']:.0f} ms | {s['cold_p95_ms']:.0f} ms |")
    print(f"| model calls / cold | {s['cached_model_p50_ms'] / s['cold_p50_ms']:.3f} | "
          f"{s['cached_model_p95_ms'] / s['cold_p95_ms']:.3f} |")
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in s.items()}))
    # A PSM prompt puts the suffix section after the prefix: each keystroke re-evaluates it.
    lines = PromptOptions().suffix_lines
    for name, text, _ in texts:
        start = middle_code_line(text)[0]
        suffix = cursor_sections(text, start, 0, suffix_lines=lines)[1]
        print(f"{name}: a PSM family's suffix section ({lines} lines) at the typed line: "
              f"{len(target.tokenize(suffix))} tokens per keystroke")


if __name__ == "__main__":
    main()

"""Keystroke to completion, with the caches against cold, replaying real edits.

    python -m benchmarks.typing [--file textwrap.py] [--chars 7000] [--preset smol]

Algorithm:
    document = the first `chars` characters of a standard library file (>= 1,500 tokens)
    replay, one completion (up to 16 tokens, to the end of the line) per event:
        type a new line of code character by character, in the middle of the file
        delete a line 20 lines above the cursor, then type on
        switch to another file and back, then type on
    each event: time to the completion with the session caches (warm), and tokens the
    target evaluated to bring its cache up to the prompt;
    every 4th event: the same completion from an empty cache (cold), on a second engine
Report p50/p95 of warm and cold and their ratio, and tokens evaluated per typed character.
"""

import argparse
import statistics
import sysconfig
import time
from pathlib import Path

import numpy as np

from completer.engine import Engine, generate
from completer.prompt import path_header
from completer.session import DocumentCaches
from models.backend import LlamaModel
from models.presets import Preset
from models.resolve import resolve

TYPED = "        width = max(len(line) for line in lines) if lines else 0\n"


def complete(engine: Engine, path: str, text: str) -> tuple[float, int]:
    """(ms to the completion, prompt tokens the target evaluated: those its cache lacked,
    plus the prompt's last token, which the first round always evaluates)."""
    started = time.perf_counter()
    before = engine.target.evaluated
    prompt = engine.model.tokenize(path_header(path) + text)
    engine.target.sync(prompt[:-1])
    synced = engine.target.evaluated - before + 1
    generate(engine, prompt, 16, stop=("\n",), document=path, language="python")
    return (time.perf_counter() - started) * 1000, synced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", default="textwrap.py")
    parser.add_argument("--other", default="shlex.py")
    parser.add_argument("--chars", type=int, default=7000)
    parser.add_argument("--preset", default="smol")
    args = parser.parse_args()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = (stdlib / args.file).read_text()[: args.chars]
    other = (stdlib / args.other).read_text()[: args.chars]
    files = resolve(Preset.from_name(args.preset))
    target, draft = LlamaModel(files.target), LlamaModel(files.draft)
    warm_engine = Engine(target, draft, n_ctx=4096)
    cold_engine = Engine(target, draft, n_ctx=4096, calibrate_s=0)
    cold_engine.costs = warm_engine.costs
    caches = DocumentCaches(warm_engine, budget_mb=1024)
    cursor = text.index("\n", len(text) // 2) + 1
    before = text[:cursor]
    print(f"{args.file}: {len(target.tokenize(text))} tokens; typing {len(TYPED)} characters at line "
          f"{before.count(chr(10)) + 1}")

    caches.activate(args.file)
    complete(warm_engine, args.file, before)  # the document is opened: one full prefill
    warm, cold, evaluated_per_char, events = [], [], [], []
    after_delete = None
    for i in range(1, len(TYPED) + 1):
        if i == len(TYPED) // 3:  # delete a line 20 lines above the cursor
            after_delete = i - 1
            lines = before.splitlines(keepends=True)
            del lines[-20]
            before = "".join(lines)
            events.append("delete a line above")
        if i == 2 * len(TYPED) // 3:  # look at another file, come back
            caches.activate(args.other)
            complete(warm_engine, args.other, other)
            caches.activate(args.file)
            events.append("switch away and back")
        prompt_text = before + TYPED[:i]
        ms, synced = complete(warm_engine, args.file, prompt_text)
        warm.append(ms)
        evaluated_per_char.append(synced)
        if i % 4 == 0:
            cold_engine.target.truncate(0)
            cold_engine.drafter.sequence.truncate(0)
            cold.append(complete(cold_engine, args.file, prompt_text)[0])

    def p(values, q):
        return float(np.percentile(values, q))

    print(f"events: {len(TYPED)} keystrokes, plus: {', '.join(events)}")
    print("| | p50 ms | p95 ms |")
    print("|---|---|---|")
    print(f"| warm (session caches) | {p(warm, 50):.0f} | {p(warm, 95):.0f} |")
    print(f"| cold (empty cache, same prompts) | {p(cold, 50):.0f} | {p(cold, 95):.0f} |")
    print(f"| warm / cold | {p(warm, 50) / p(cold, 50):.3f} | {p(warm, 95) / p(cold, 95):.3f} |")
    typing_only = [n for i, n in enumerate(evaluated_per_char) if i != after_delete]
    print(f"prompt tokens evaluated per typed character: mean {statistics.mean(typing_only):.2f}, "
          f"max {max(typing_only)}; after deleting the line above: {evaluated_per_char[after_delete]} "
          f"(the prompt holds {len(target.tokenize(path_header(args.file) + before))})")


if __name__ == "__main__":
    main()

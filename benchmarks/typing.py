"""Keystroke to completion, with the caches against cold, replaying real edits.

    python -m benchmarks.typing [--file textwrap.py] [--chars 7000] [--preset smol]

Algorithm:
    document = the first `chars` characters of a standard library file (>= 1,500 tokens)
    replay through the Completer (as the language server does), one completion
    (up to 16 tokens, no time budget) per event:
        type a new line of code character by character, in the middle of the file
        delete a line 20 lines above the cursor, then type on
        switch to another file and back, then type on
    each event: time to the completion with the session's caches (warm), where it came
    from (model or forward cache), and prompt tokens the target's cache lacked;
    every 4th event: the same completion from empty caches (cold), on a second engine
    for a PSM prompt family, the suffix section each keystroke re-evaluates, in tokens
Report p50/p95 of warm and cold and their ratio, and tokens evaluated per typed character.
"""

import argparse
import statistics
import sysconfig
import time
from pathlib import Path

import numpy as np

from completer.config import Config, GenerationOptions
from completer.engine import Engine
from completer.prompt import cursor_sections
from completer.session import Completer, Completion, CompletionRequest
from models.backend import LlamaModel
from models.presets import Preset
from models.resolve import resolve

TYPED = "        width = max(len(line) for line in lines) if lines else 0\n"


def complete(completer: Completer, path: str, text: str, cursor: int) -> tuple[float, Completion]:
    """(ms to the completion, the completion) with the cursor at offset `cursor`."""
    before = text[:cursor]
    line = before.count("\n")
    request = CompletionRequest(path, path, text, line, len(before) - (before.rfind("\n") + 1), "python")
    started = time.perf_counter()
    completion = completer.complete(request)
    return (time.perf_counter() - started) * 1000, completion


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
    config = Config(generation=GenerationOptions(max_tokens=16, time_budget_ms=0))
    warm_engine = Engine(target, draft, n_ctx=4096)
    cold_engine = Engine(target, draft, n_ctx=4096, calibrate_s=0)
    cold_engine.costs = warm_engine.costs
    warm, cold_completer = Completer(warm_engine, config), Completer(cold_engine, config)
    cursor = text.index("\n", len(text) // 2) + 1
    print(f"{args.file}: {len(target.tokenize(text))} tokens; typing {len(TYPED)} characters at line "
          f"{text[:cursor].count(chr(10)) + 1}")

    complete(warm, args.file, text, cursor)  # the document is opened: one full prefill
    warm_ms, model_ms, cold_ms, evaluated, suffix_tokens, events = [], [], [], [], [], []
    after_delete = None
    for i in range(1, len(TYPED) + 1):
        if i == len(TYPED) // 3:  # delete a line 20 lines above the cursor
            after_delete = len(evaluated)
            line_start = text.rindex("\n", 0, cursor)
            for _ in range(20):
                line_start = text.rindex("\n", 0, line_start)
            line_end = text.index("\n", line_start + 1)
            text = text[:line_start] + text[line_end:]
            cursor -= line_end - line_start
            events.append("delete a line above")
        if i == 2 * len(TYPED) // 3:  # look at another file, come back
            complete(warm, args.other, other, len(other) // 2)
            events.append("switch away and back")
        text = text[:cursor] + TYPED[i - 1] + text[cursor:]
        cursor += 1
        ms, completion = complete(warm, args.file, text, cursor)
        warm_ms.append(ms)
        if completion.source == "model":
            model_ms.append(ms)
            evaluated.append(completion.evaluated_tokens)
        elif after_delete == len(evaluated):
            after_delete = None
        line = text[:cursor].count("\n")
        suffix = cursor_sections(text, line, cursor - (text.rfind("\n", 0, cursor) + 1),
                                 config.prompt.prefix_lines, config.prompt.suffix_lines)[1]
        suffix_tokens.append(len(target.tokenize(suffix)))
        if i % 4 == 0:
            for engine in (cold_engine,):
                engine.target.truncate(0)
                engine.drafter.sequence.truncate(0)
            cold_completer.sessions.clear()
            cold_ms.append(complete(cold_completer, args.file, text, cursor)[0])

    def p(values, q):
        return float(np.percentile(values, q))

    print(f"events: {len(TYPED)} keystrokes, plus: {', '.join(events)}; "
          f"{len(warm_ms) - len(model_ms)} answered by the forward cache")
    print("| | p50 ms | p95 ms |")
    print("|---|---|---|")
    print(f"| warm, every keystroke | {p(warm_ms, 50):.0f} | {p(warm_ms, 95):.0f} |")
    print(f"| warm, keystrokes that called the model | {p(model_ms, 50):.0f} | {p(model_ms, 95):.0f} |")
    print(f"| cold (empty caches, same prompts) | {p(cold_ms, 50):.0f} | {p(cold_ms, 95):.0f} |")
    print(f"| warm (model calls) / cold | {p(model_ms, 50) / p(cold_ms, 50):.3f} | "
          f"{p(model_ms, 95) / p(cold_ms, 95):.3f} |")
    typing_only = [n for i, n in enumerate(evaluated) if i != after_delete]
    deleted = f"{evaluated[after_delete]}" if after_delete is not None else "(forward cache)"
    print(f"prompt tokens evaluated per typed character (model calls): mean {statistics.mean(typing_only):.2f}, "
          f"max {max(typing_only)}; after deleting the line above: {deleted} "
          f"(the prompt holds {completion.prompt_tokens or '?'})")
    print(f"a PSM family would also re-evaluate the suffix section ({config.prompt.suffix_lines} lines) per "
          f"keystroke: median {statistics.median(suffix_tokens):.0f} tokens, max {max(suffix_tokens)}")


if __name__ == "__main__":
    main()

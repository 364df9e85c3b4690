"""What several candidates cost: a completion with generation.candidates n against one,
on the same requests, through the Completer on this machine's engine.

    python -m benchmarks.candidates [--holes 20] [--n 3] [--file difflib.py] [--preset smol] [--mode auto]

Algorithm:
    load the preset's pair once; one Completer per case (candidates 1 and n) over one
        LocalDecoder, options {"generation": {"candidates": c, "time_budget_ms": 0,
        "draft_mode": mode}} and the rest defaults
    holes: benchmarks.prefetch.holes, cuts inside non-blank lines of a standard-library module
    per hole, for each case in an order that alternates per hole (machine drift hits both alike):
        cold: the engine's caches emptied, then complete() timed: the prompt evaluated and
            the answer decoded, as for a file just opened
        warm: Completer.warm() at the same cursor first (the prompt in the caches, as after
            keystrokes), then complete() timed: decoding alone
        (each case's Completer is reset first, so no forward cache answers)
Report per kind (cold, warm): each case's median, the median of the per-hole ratios n/1,
and how many candidates the n case offered (after post-processing dropped empty ones
and repeats).
"""

import argparse
import statistics
import sysconfig
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.prefetch import holes
from completer.config import Config, GenerationOptions, ModelOptions
from completer.decoders.local import LocalDecoder
from completer.editor.completer import Completer
from completer.loading import completer_over, engine_for, load_pair
from completer.requests import CompletionRequest


def timed(completer: Completer, request: CompletionRequest, warm: bool) -> tuple[float, int]:
    """ms of complete() at `request` after emptying the caches (and warming the prompt
    with `warm`), and how many candidates it offered."""
    completer.reset()
    if warm:
        completer.warm(request)
    started = time.perf_counter()
    answer = completer.complete(request)
    return (time.perf_counter() - started) * 1000, len(answer.alternatives) + bool(answer.text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--holes", type=int, default=20)
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--file", default="difflib.py")
    parser.add_argument("--preset", default="smol")
    parser.add_argument("--mode", default="auto")
    args = parser.parse_args()
    base = Config(models=ModelOptions(preset=args.preset),
                  generation=GenerationOptions(time_budget_ms=0, draft_mode=args.mode))
    engine, _ = engine_for(load_pair(base.models), base)
    decoder = LocalDecoder(engine)
    cases = {count: completer_over(decoder, replace(base, generation=replace(base.generation, candidates=count)))
             for count in (1, args.n)}
    text = (Path(sysconfig.get_paths()["stdlib"]) / args.file).read_text()
    results = {(kind, count): [] for kind in ("cold", "warm") for count in cases}
    offered = []
    for number, document in enumerate(holes(text, args.holes)):
        request = CompletionRequest(f"file:///hole{number}.py", f"/hole{number}.py", document, len(document), "python")
        order = list(cases) if number % 2 == 0 else list(cases)[::-1]
        for kind in ("cold", "warm"):
            for count in order:
                ms, made = timed(cases[count], request, kind == "warm")
                results[kind, count].append(ms)
                if count == args.n and kind == "cold":
                    offered.append(made)
    print(f"{args.holes} holes in {args.file}, {args.preset}, mode {args.mode}, default max_tokens "
          f"{base.generation.max_tokens}; candidates offered at n = {args.n}: median {statistics.median(offered)}, "
          f"{sum(offered)} in all")
    print(f"| request | 1 candidate p50 | {args.n} candidates p50 | time of {args.n} / time of 1 (median per hole) |")
    print("|---|---|---|---|")
    for kind, label in (("cold", "prompt evaluated and decoded"), ("warm", "prompt cached: decoding only")):
        one, several = results[kind, 1], results[kind, args.n]
        ratio = statistics.median(s / o for s, o in zip(several, one))
        print(f"| {label} | {statistics.median(one):.0f} ms | {statistics.median(several):.0f} ms | {ratio:.2f}x |")


if __name__ == "__main__":
    main()

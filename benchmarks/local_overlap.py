"""The local engine when its requests overlap: an inline completion that arrives while a
next edit and another document's candidates hold the engine, with speculation (auto)
and without (target), against the same completion alone.

    python -m benchmarks.local_overlap [--holes 12] [--file difflib.py] [--preset smol] [--candidates 3]

Algorithm:
    load the preset's pair once; one LocalDecoder; per mode (target, auto) two Completers
        over it, options {"generation": {"time_budget_ms": 0, "draft_mode": mode,
        "candidates": c}}: the editor's (c = 1) and another document's (c = --candidates)
    holes: benchmarks.prefetch.holes of a standard-library module; document A is the
        i-th cut, document B the next cut under another name
    per hole, per mode (their order alternating per hole), per load:
        alone: the caches emptied, A's and B's prompts warmed, complete(A) timed
        overlapped: the same, then at once, each on its own thread: next_edit(A) and
            complete(B) with its candidates, and 20 ms later complete(A), which so
            arrives while the engine is taken, as a keystroke's request does;
            complete(A) timed from its start to its answer, and the three from the first
            start to the last answer
The local engine takes one request at a time (LocalDecoder's turn): an overlap makes a
request wait, never a wider batch, and every round's draft length comes from the same
measured cost curve as alone. The report shows whether that holds: per mode and load,
complete(A)'s p50 and p95, its tokens per target pass and drafted tokens per speculative
round, the three's p50, and auto's speed over target's (the ratio of the p50s).
"""

import argparse
import statistics
import sysconfig
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from benchmarks.prefetch import holes
from completer.config import Config, GenerationOptions, ModelOptions
from completer.decoders.local import LocalDecoder
from completer.editor.completer import Completer
from completer.loading import completer_over, engine_for, load_pair
from completer.requests import CompletionRequest

MODES = ("target", "auto")
LOADS = ("alone", "overlapped")
ARRIVES_AFTER_S = 0.02  # the completion's request comes once the other two hold the engine


@dataclass
class Case:
    """One mode at one load: its timings, and the engine's counts over its complete(A)s."""

    inline_ms: list[float] = field(default_factory=list)
    all_ms: list[float] = field(default_factory=list)
    tokens: int = 0
    passes: int = 0
    drafted: int = 0
    rounds: int = 0

    def count(self, result) -> None:
        """A decode's engine statistics (Generation.stats), where it decoded."""
        stats = getattr(result, "stats", None)
        if stats is not None:
            self.tokens += stats.tokens
            self.passes += stats.target_passes
            self.drafted += stats.drafted
            self.rounds += stats.speculative_rounds


def prepared(completers: tuple[Completer, Completer], a: CompletionRequest, b: CompletionRequest) -> None:
    """Both documents' prompts in the caches, as after keystrokes, and nothing else."""
    for completer in completers:
        completer.reset()
    completers[0].warm(a)
    completers[1].warm(b)


def alone(completers: tuple[Completer, Completer], a: CompletionRequest, b: CompletionRequest, case: Case) -> None:
    prepared(completers, a, b)
    started = time.perf_counter()
    answer = completers[0].complete(a)
    case.inline_ms.append((time.perf_counter() - started) * 1000)
    case.count(answer.result)


def overlapped(completers: tuple[Completer, Completer], a: CompletionRequest, b: CompletionRequest,
               case: Case) -> None:
    prepared(completers, a, b)
    ends: dict[str, float] = {}

    def run(name: str, call, request: CompletionRequest, delay_s: float = 0.0) -> None:
        time.sleep(delay_s)
        started = time.perf_counter()
        result = call(request).result
        ends[name] = time.perf_counter()
        if name == "inline":
            case.inline_ms.append((ends[name] - started) * 1000)
            case.count(result)

    threads = [threading.Thread(target=run, args=("edit", completers[0].next_edit, a)),
               threading.Thread(target=run, args=("candidates", completers[1].complete, b)),
               threading.Thread(target=run, args=("inline", completers[0].complete, a, ARRIVES_AFTER_S))]
    first = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    case.all_ms.append((max(ends.values()) - first) * 1000)


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def report(cases: dict[tuple[str, str], Case], settings: str) -> str:
    lines = [settings, "",
             "| mode | load | completion p50 ms | p95 ms | its tokens / target pass | its drafted / round "
             "| all three p50 ms | completion speed, auto over target |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in MODES:
        for load in LOADS:
            case = cases[mode, load]
            speed = statistics.median(cases["target", load].inline_ms) / statistics.median(case.inline_ms)
            lines.append(f"| {mode} | {load} | {statistics.median(case.inline_ms):.0f} "
                         f"| {percentile(case.inline_ms, 95):.0f} "
                         f"| {case.tokens / max(case.passes, 1):.2f} "
                         f"| {f'{case.drafted / case.rounds:.2f}' if case.rounds else '-'} "
                         f"| {f'{statistics.median(case.all_ms):.0f}' if case.all_ms else '-'} "
                         f"| {f'{speed:.2f}x' if mode == 'auto' else '-'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--holes", type=int, default=12)
    parser.add_argument("--file", default="difflib.py")
    parser.add_argument("--preset", default="smol")
    parser.add_argument("--candidates", type=int, default=3)
    args = parser.parse_args()
    base = Config(models=ModelOptions(preset=args.preset), generation=GenerationOptions(time_budget_ms=0))
    engine, _ = engine_for(load_pair(base.models), base)
    decoder = LocalDecoder(engine)

    def completer(mode: str, candidates: int) -> Completer:
        generation = replace(base.generation, draft_mode=mode, candidates=candidates)
        return completer_over(decoder, replace(base, generation=generation))

    completers = {mode: (completer(mode, 1), completer(mode, args.candidates)) for mode in MODES}
    cases = {(mode, load): Case() for mode in MODES for load in LOADS}
    documents = holes((Path(sysconfig.get_paths()["stdlib"]) / args.file).read_text(), args.holes + 1)
    for number in range(args.holes):
        a = CompletionRequest(f"file:///a{number}.py", f"/a{number}.py", documents[number],
                              len(documents[number]), "python")
        b = CompletionRequest(f"file:///b{number}.py", f"/b{number}.py", documents[number + 1],
                              len(documents[number + 1]), "python")
        for mode in MODES if number % 2 == 0 else MODES[::-1]:
            alone(completers[mode], a, b, cases[mode, "alone"])
            overlapped(completers[mode], a, b, cases[mode, "overlapped"])
    print(report(cases, f"{args.holes} holes in {args.file}, {args.preset}; the other document's completion asks for "
                        f"{args.candidates} candidates; max_tokens {base.generation.max_tokens}"))


if __name__ == "__main__":
    main()

"""What speculation buys: every draft mode side by side on holes in real Python files.

    python -m benchmarks.speculative [--holes N] [--max-tokens 48] [--preset smol] [--out FILE]

Algorithm:
    holes  = N cursor positions in the standard library's Python files (seeded):
             a non-empty, non-comment line inside a function, cut at a column in
             [0, min(15, len)]; the prompt is the file's text before the cursor
    for each hole, modes in an order rotated per hole (machine drift hits all alike):
        prefill the prompt (not timed), then time `max_tokens` new tokens at T = 0
    per mode: speedup = target-only decode time / this mode's, per hole and overall;
        acceptance, tokens per target pass, predicted vs measured E;
        identical output to target-only (differences at a near tie, NEAR_TIE_LOGITS, counted apart);
        ideal speedup = the rounds it ran, priced by the measured cost curve;
        projection = the same rounds if a verify pass cost one step (a memory-bound GPU)

The peer is llama-cpp-python's own LlamaPromptLookupDecoding(num_pred_tokens=10) on the
same model, prompts and token budget. Results go to JSON; --holes-file replays them.
"""

import argparse
import json
import random
import statistics
import sysconfig
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from completer.engine import Engine, generate
from completer.prompt import path_header
from completer.speculative import NEAR_TIE_LOGITS
from models.backend import LlamaContext, LlamaModel, default_threads
from models.presets import Preset
from models.resolve import resolve

MODES = ["target", "ngram", "draft", "hybrid", "auto", "peer"]
N_CTX = 2048
PROMPT_TOKENS = 1500  # the prompt keeps the last this many tokens before the cursor


def pick_holes(count: int, seed: int) -> list[dict]:
    """Cursor positions inside function bodies of stdlib modules, reproducible by seed."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if 4_000 < p.stat().st_size < 200_000)
    rng = random.Random(seed)
    holes = []
    while len(holes) < count:
        path = rng.choice(files)
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        inside = [i for i, line in enumerate(lines) if line.startswith("        ") and line.strip()
                  and not line.strip().startswith(("#", '"', "'")) and i > 40]
        if not inside:
            continue
        line = rng.choice(inside)
        column = rng.randint(0, min(15, len(lines[line].rstrip("\n"))))
        holes.append({"file": str(path.relative_to(stdlib)), "line": line, "column": column})
    return holes


def hole_prompt(hole: dict) -> tuple[str, str]:
    """(prompt text, the rest of the file after the cursor)."""
    path = Path(sysconfig.get_paths()["stdlib"]) / hole["file"]
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    before = "".join(lines[: hole["line"]]) + lines[hole["line"]][: hole["column"]]
    after = lines[hole["line"]][hole["column"]:] + "".join(lines[hole["line"] + 1 :])
    return path_header(hole["file"]) + before, after  # the smol pair has no FIM: prefix only


def run_peer(llm, prompt: list[int], max_tokens: int, is_end) -> tuple[list[int], float]:
    """llama-cpp-python's high-level generator with its prompt-lookup draft, greedy."""
    llm.reset()
    llm.eval(prompt)  # prefill outside the timing, as for our modes; generate() then reuses it
    started = time.perf_counter()
    tokens = []
    for token in llm.generate(prompt, temp=0.0, top_k=1):
        if is_end(token) or len(tokens) >= max_tokens:
            break
        tokens.append(token)
    return tokens, (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--holes", type=int, default=36)
    parser.add_argument("--holes-file", type=Path, help="replay the holes of an earlier run's JSON")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--preset", default="smol")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/speculative-results.json"))
    args = parser.parse_args()
    console = Console()

    holes = json.loads(args.holes_file.read_text())["holes"] if args.holes_file else pick_holes(args.holes, args.seed)
    files = resolve(Preset.from_name(args.preset))
    target_model = LlamaModel(files.target)
    engine = Engine(target_model, LlamaModel(files.draft), n_ctx=N_CTX)
    calibrated = dict(engine.costs.verify_ms)
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    peer = Llama(str(files.target), n_ctx=N_CTX, n_threads=default_threads(), verbose=False, flash_attn=False,
                 draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10), logits_all=True)
    reference = LlamaContext(target_model, n_ctx=N_CTX)

    results = []
    with Progress(console=console) as progress:
        task = progress.add_task("holes", total=len(holes))
        for index, hole in enumerate(holes):
            text, _ = hole_prompt(hole)
            prompt = target_model.tokenize(text)[-PROMPT_TOKENS:]
            order = MODES[index % len(MODES):] + MODES[: index % len(MODES)]
            row = {"hole": hole, "modes": {}}
            for mode in order:
                if mode == "peer":
                    tokens, ms = run_peer(peer, prompt, args.max_tokens, target_model.is_end_of_generation)
                    row["modes"][mode] = {"tokens": tokens, "ms": ms}
                    continue
                engine.target.sync(prompt[:-1])  # prefill outside the timing
                if engine.drafter:
                    engine.drafter.sequence.sync(prompt[:-1])
                result = generate(engine, prompt, args.max_tokens, mode=mode, document=hole["file"],
                                  language="python")
                s = result.stats
                row["modes"][mode] = {
                    "tokens": result.tokens, "ms": s.total_ms, "passes": s.target_passes, "drafted": s.drafted,
                    "accepted": s.accepted, "spec_rounds": s.speculative_rounds,
                    "spec_tokens": s.tokens_in_speculative_rounds, "predicted": s.predicted_tokens,
                    "rounds": s.rounds,
                }
            plain = row["modes"]["target"]["tokens"]
            for mode, data in row["modes"].items():
                data["identical"] = data["tokens"] == plain
                if not data["identical"]:
                    first = next((i for i, (a, b) in enumerate(zip(plain, data["tokens"])) if a != b),
                                 min(len(plain), len(data["tokens"])))
                    reference.truncate(0)
                    logits = np.sort(reference.eval(prompt + plain[:first], 0, logits_at=[-1])[0])
                    data["top2_gap"] = float(logits[-1] - logits[-2])
                    data["near_tie"] = data["top2_gap"] < NEAR_TIE_LOGITS
            results.append(row)
            progress.advance(task)

    costs = engine.costs
    summary = summarize(results, costs)
    show(console, summary, len(holes), args, calibrated)
    args.out.write_text(json.dumps({
        "holes": holes, "max_tokens": args.max_tokens, "preset": args.preset, "summary": summary,
        "cost_curve_ms": {str(k): v for k, v in sorted(costs.verify_ms.items())},
        "draft_token_ms": costs.draft_token_ms, "results": results,
    }, indent=1))
    console.print(f"per-hole results: {args.out}")


def summarize(results: list[dict], costs) -> dict:
    summary = {}
    plain_ms = sum(r["modes"]["target"]["ms"] for r in results)
    step = costs.verify(1)
    for mode in MODES:
        rows = [r["modes"][mode] for r in results]
        total_ms = sum(d["ms"] for d in rows)
        tokens = sum(len(d["tokens"]) for d in rows)
        per_hole = [r["modes"]["target"]["ms"] / r["modes"][mode]["ms"] * len(r["modes"][mode]["tokens"])
                    / max(1, len(r["modes"]["target"]["tokens"])) for r in results]
        entry = {
            "tokens_per_s": tokens / total_ms * 1000,
            "speedup": (tokens / total_ms) / (sum(len(r["modes"]["target"]["tokens"]) for r in results) / plain_ms),
            "median_speedup": statistics.median(per_hole),
            "identical": sum(d["identical"] for d in rows) / len(rows),
            "near_tie_flips": sum(1 for d in rows if not d["identical"] and d.get("near_tie")),
            "real_differences": sum(1 for d in rows if not d["identical"] and not d.get("near_tie")),
        }
        if mode != "peer":
            drafted = sum(d["drafted"] for d in rows)
            spec_rounds = sum(d["spec_rounds"] for d in rows)
            rounds = [tuple(x) for d in rows for x in d["rounds"]]
            ideal_ms = sum(costs.draft(p, k) + costs.verify(k + 1) if p else step for p, k in rounds)
            free_ms = sum(costs.draft(p, k) + step if p else step for p, k in rounds)
            entry.update({
                "acceptance": sum(d["accepted"] for d in rows) / drafted if drafted else 0.0,
                "tokens_per_pass": tokens / sum(d["passes"] for d in rows),
                "predicted_e": sum(d["predicted"] for d in rows) / spec_rounds if spec_rounds else 0.0,
                "measured_e": sum(d["spec_tokens"] for d in rows) / spec_rounds if spec_rounds else 0.0,
                "speculative_share": spec_rounds / sum(d["passes"] for d in rows),
                "ideal_speedup": tokens * step / ideal_ms,
                "projected_free_verify": tokens * step / free_ms,
            })
        summary[mode] = entry
    summary["_gaps"] = [d["top2_gap"] for r in results for d in r["modes"].values() if "top2_gap" in d]
    return summary


def show(console: Console, summary: dict, holes: int, args, calibrated: dict) -> None:
    table = Table(title=f"{holes} stdlib holes, {args.max_tokens} new tokens, T=0, preset {args.preset}")
    for column in ["mode", "tok/s", "speedup", "median", "ideal", "accept", "tok/pass", "pred E", "meas E",
                   "spec share", "identical", "GPU projection*"]:
        table.add_column(column, justify="right")
    for mode in MODES:
        e, spec = summary[mode], mode != "peer"
        table.add_row(
            mode, f"{e['tokens_per_s']:.1f}", f"{e['speedup']:.2f}x", f"{e['median_speedup']:.2f}x",
            f"{e['ideal_speedup']:.2f}x" if spec else "-",
            f"{e['acceptance']:.2f}" if spec else "-", f"{e['tokens_per_pass']:.2f}" if spec else "-",
            f"{e['predicted_e']:.2f}" if spec else "-", f"{e['measured_e']:.2f}" if spec else "-",
            f"{e['speculative_share']:.0%}" if spec else "-",
            f"{e['identical']:.0%} ({e['near_tie_flips']} ties, {e['real_differences']} other)",
            f"{e['projected_free_verify']:.2f}x" if spec else "-",
        )
    console.print(table)
    console.print("* projection, not a measurement: the same rounds if a verify pass cost one decode step, "
                  "as on a memory-bound GPU target.")
    gaps = sorted(round(g, 3) for g in summary["_gaps"])
    console.print(f"top-2 logit gaps where an output first differs from target-only: {gaps}")
    console.print("calibrated verify ms by batch size: "
                  + " ".join(f"{n}:{ms:.1f}" for n, ms in sorted(calibrated.items())))


if __name__ == "__main__":
    main()

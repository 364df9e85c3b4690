"""A bench run's arithmetic, on plain records: small pure functions, checked by hand in tests.

A record is one mode on one hole:
    {"hole": index, "kind": str, "mode": str, "tokens": [ids], "ms": generation time,
     "passes": target forward passes, "drafted": n, "accepted": n, "spec_rounds": n,
     "spec_tokens": tokens those rounds made, "predicted": sum of predicted E,
     "rounds": [[provider or null, k, match length, predicted tokens, tokens made], ...],
     "identical": bool, "near_tie": bool,
     "parting_gap": where greedy output parted from target's, target's logit of its
     token less its logit of this mode's, "shown": post-processed text,
     "cross_file": the hole's cross-file identifiers, "cross_file_written": those of
     them the shown text writes}
"""

import difflib
import statistics

import numpy as np

from completer.bench.holes import written_names
from completer.engine.tuning import CostModel, match_bucket


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def exact_first_line(shown: str, truth: str) -> bool:
    """The first non-empty line of the completion equals the truth's, ignoring the
    whitespace around them."""
    def first(text: str) -> str:
        return next((line.strip() for line in text.split("\n") if line.strip()), "")

    return first(shown) == first(truth)


def compared(text: str, kind: str) -> str:
    """What of a text a hole of `kind` is judged on: the first non-empty line for line
    holes, everything for blocks."""
    if kind == "block":
        return text
    return next((line for line in text.split("\n") if line.strip()), "")


def judged(text: str, kind: str) -> str:
    """What of a completion a hole of `kind` is judged on, as it stands at the cursor: all
    of it for blocks, up to the end of its first non-empty line for line holes."""
    if kind == "block":
        return text
    first = next((i for i, line in enumerate(text.split("\n")) if line.strip()), 0)
    return "\n".join(text.split("\n")[: first + 1])


def cross_file_written(names: tuple[str, ...] | list[str], before: str, shown: str, after: str, kind: str,
                       language: str) -> list[str]:
    """The hole's cross-file identifiers `names` that the completion writes as identifiers
    (not inside a string or comment, not as part of a longer name), set in the file
    between `before` and `after`."""
    written = set(written_names(before, judged(shown, kind), after, language)) if names else set()
    return [name for name in names if name in written]


def identifier_match(records: list[dict]) -> float | None:
    """The mean, over the holes with cross-file identifiers, of the share of them the
    completion writes (CrossCodeEval's identifier match); None when no hole has any."""
    shares = [len(r["cross_file_written"]) / len(r["cross_file"]) for r in records if r.get("cross_file")]
    return statistics.mean(shares) if shares else None


def edit_similarity(shown: str, truth: str) -> float:
    """1 for equal texts, 0 for nothing in common (difflib's ratio, whitespace-trimmed)."""
    a, b = shown.strip(), truth.strip()
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def speedups(target: list[dict], mode: list[dict]) -> list[float]:
    """Per hole: this mode's tokens/s over target's on the same hole."""
    return [(len(m["tokens"]) / m["ms"]) / (len(t["tokens"]) / t["ms"])
            for t, m in zip(target, mode) if t["tokens"] and m["tokens"] and t["ms"] > 0 and m["ms"] > 0]


def rounds_ms(rounds: list[list], costs: CostModel, free_verify: bool = False) -> float:
    """What the rounds cost by the measured curve; with free_verify, each verify pass
    priced as one decode step (a memory-bound target, as on a GPU)."""
    step = costs.verify(1)
    return sum((costs.draft(provider, k) + (step if free_verify else costs.verify(k + 1))) if provider else step
               for provider, k, *_ in rounds)


def summarize_mode(target: list[dict], mode: list[dict], costs: CostModel | None, speculative: bool) -> dict:
    """One mode's summary entry, from its records and target's, hole by hole in the same order."""
    tokens = sum(len(r["tokens"]) for r in mode)
    ms = sum(r["ms"] for r in mode)
    target_rate = sum(len(r["tokens"]) for r in target) / sum(r["ms"] for r in target)
    per_hole = speedups(target, mode)
    drafted = sum(r.get("drafted", 0) for r in mode)
    spec_rounds = sum(r.get("spec_rounds", 0) for r in mode)
    passes = sum(r.get("passes", 0) for r in mode)
    wall_ms = sum(r.get("wall_ms", r["ms"]) for r in mode)
    profiled = passes and all("decode_ms" in r for r in mode)  # our modes: llama.cpp's share of the time
    entry = {
        "holes": len(mode),
        "failed": None,
        "tokens_per_s": tokens / ms * 1000 if ms else 0.0,
        "wall_tokens_per_s": tokens / wall_ms * 1000 if wall_ms else 0.0,
        "speedup_vs_target": (tokens / ms) / target_rate if ms else 0.0,
        "median_speedup_vs_target": statistics.median(per_hole) if per_hole else 0.0,
        "p50_ms": percentile([r["ms"] for r in mode], 50),
        "p95_ms": percentile([r["ms"] for r in mode], 95),
        "acceptance_rate": sum(r.get("accepted", 0) for r in mode) / drafted if drafted else None,
        "tokens_per_pass": tokens / passes if passes else None,
        "predicted_tokens_per_pass": sum(r.get("predicted", 0.0) for r in mode) / spec_rounds if spec_rounds else None,
        "measured_tokens_per_round": sum(r.get("spec_tokens", 0) for r in mode) / spec_rounds if spec_rounds else None,
        "identical_rate": sum(r["identical"] for r in mode) / len(mode),
        "near_tie_flips": sum(1 for r in mode if not r["identical"] and r.get("near_tie")),
        "other_differences": sum(1 for r in mode if not r["identical"] and not r.get("near_tie")),
        "exact_match": sum(exact_first_line(r["shown"], r["truth"]) for r in mode) / len(mode),
        "edit_similarity": statistics.mean(edit_similarity(compared(r["shown"], r["kind"]),
                                                           compared(r["truth"], r["kind"])) for r in mode),
        "identifier_match": identifier_match(mode),
        "identifier_holes": sum(1 for r in mode if r.get("cross_file")),
        "projected_free_verify_speedup": None,
        # Per target pass (our modes): llama_decode, copying logits out, and the rest.
        "decode_ms_per_pass": sum(r["decode_ms"] for r in mode) / passes if profiled else None,
        "logits_ms_per_pass": sum(r["logits_ms"] for r in mode) / passes if profiled else None,
        "other_ms_per_pass": (ms - sum(r["decode_ms"] + r["logits_ms"] for r in mode)) / passes if profiled else None,
    }
    if speculative and costs is not None and passes:
        rounds = [round_ for r in mode for round_ in r["rounds"]]
        step_ms = costs.verify(1)
        entry["projected_free_verify_speedup"] = tokens * step_ms / rounds_ms(rounds, costs, free_verify=True)
    return entry


def acceptance_by_kind(records: list[dict]) -> dict[str, dict[str, float]]:
    """mode -> hole kind -> acceptance rate of drafted tokens, for modes that draft."""
    table: dict[str, dict[str, list[int]]] = {}
    for r in records:
        if r.get("drafted"):
            counts = table.setdefault(r["mode"], {}).setdefault(r["kind"], [0, 0])
            counts[0] += r["accepted"]
            counts[1] += r["drafted"]
    return {mode: {kind: a / d for kind, (a, d) in kinds.items()} for mode, kinds in table.items()}


def figures_by_kind(records: list[dict]) -> dict[str, dict[str, tuple[float | None, float]]]:
    """mode -> hole kind -> (acceptance of drafted tokens, None when nothing was drafted;
    tokens per target pass), for our modes (those that count their passes)."""
    table: dict[str, dict[str, list[int]]] = {}
    for r in records:
        if r.get("passes"):
            counts = table.setdefault(r["mode"], {}).setdefault(r["kind"], [0, 0, 0, 0])
            for i, value in enumerate((r.get("accepted", 0), r.get("drafted", 0), len(r["tokens"]), r["passes"])):
                counts[i] += value
    return {mode: {kind: (accepted / drafted if drafted else None, tokens / passes)
                   for kind, (accepted, drafted, tokens, passes) in kinds.items()}
            for mode, kinds in table.items()}


def rounds_by_match(records: list[dict]) -> dict[str, dict[tuple[str, int], tuple[int, float, float]]]:
    """mode -> (n-gram lookup's source, "ngram" or "index"; its match bucket,
    tuning.match_bucket) -> (rounds, tokens the tuner predicted per round, tokens made
    per round)."""
    table: dict[str, dict[tuple[str, int], list[float]]] = {}
    for r in records:
        for provider, _, match, predicted, made in (round_ for round_ in r.get("rounds", ()) if len(round_) == 5):
            if provider in ("ngram", "index"):
                sums = table.setdefault(r["mode"], {}).setdefault((provider, match_bucket(match)), [0, 0.0, 0.0])
                sums[0] += 1
                sums[1] += predicted
                sums[2] += made
    return {mode: {bucket: (n, predicted / n, made / n) for bucket, (n, predicted, made) in sorted(buckets.items())}
            for mode, buckets in table.items()}


def summarize_timed(target: list[dict], mode: list[dict], costs: CostModel | None, speculative: bool) -> dict:
    """summarize_mode over the holes the mode was timed on (a peer's record marked
    "untimed" is not), against target's on the same holes; `untimed_holes` and `untimed`
    (the first reason) say what was left out."""
    untimed = [r for r in (*mode, *target) if "untimed" in r]
    left_out = {r["hole"] for r in untimed}
    entry = summarize_mode([r for r in target if r["hole"] not in left_out],
                           [r for r in mode if r["hole"] not in left_out], costs, speculative)
    return {**entry, "untimed_holes": sorted(left_out), "untimed": untimed[0]["untimed"] if untimed else None}

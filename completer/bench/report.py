"""A bench run's report: the summary per mode, the terminal table, the JSON, the figure."""

import os
import platform
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

from rich import box
from rich.table import Table

from completer.bench import LLAMA_SERVER, LLAMA_SERVER_PEERS, PEERS
from completer.bench.holes import Hole
from completer.bench.metrics import acceptance_by_kind, figures_by_kind, rounds_by_match, summarize_timed
from completer.bench.run import Bench
from completer.engine.tuning import MATCH_BUCKET_NAMES, CostModel
from completer.engine.workspace_index import IndexStats
from completer.models.resolve import ModelFiles


def machine() -> dict:
    from completer.models.llama import default_threads, gpu_offload_supported, system_info

    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.exists() else []
    cpu = names[0] if names else platform.processor()
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu": cpu,
            "cores": os.cpu_count(), "threads": default_threads(), "gpu_offload": gpu_offload_supported(),
            "llama_cpp_build": system_info(), "completer": version("completer"),
            "llama_cpp_python": version("llama_cpp_python")}


def document(bench: Bench, seed: int, roots: list[Path], distilled: Path | None, summary: dict, holes: list[Hole],
             records: list[dict]) -> dict:
    """The report file: the machine, models and settings (the threads each engine's
    contexts ran with, as llama.cpp reads them back), the cost curve the modelled columns
    used, the summary, and every hole and per-hole record."""
    settings, files = bench.settings, bench.pair.files
    models, generation, drafting = settings.config.models, settings.config.generation, settings.config.drafting
    return {"machine": machine(), "preset": None if models.target else models.preset,
            "models": {"target": str(files.target), "draft": str(files.draft) if files.draft else None,
                       "distilled_draft": str(distilled) if distilled else None},
            "settings": {"modes": list(settings.modes), "n": len(holes), "seed": seed,
                         "max_tokens": generation.max_tokens, "temperature": generation.temperature,
                         "context_tokens": models.context_tokens, "exact": settings.exact,
                         "copy_target": settings.copy_target,
                         "roots": [str(r) for r in roots], "index_mb": drafting.index_mb,
                         "tree_branches": drafting.tree_branches, "threads": bench.threads},
            "workspace_index": asdict(bench.index_stats),
            "cost_curve_ms": {str(k): v for k, v in sorted(bench.engine.costs.verify_ms.items())},
            "summary": summary, "holes": [h.to_json() for h in holes], "records": records}


def summarize(records: list[dict], modes: tuple[str, ...], costs: CostModel) -> dict:
    """The `summary` object: mode -> its entry. A peer that failed (or was timed on no
    hole) gets its reason and no figures: part of a run would not compare with the other
    modes' whole. One left untimed on some holes is summed over the rest (summarize_timed)."""
    by_mode = {mode: sorted((r for r in records if r["mode"] == mode), key=lambda r: r["hole"]) for mode in modes}
    failed = {mode: next(r.get("failed") or r["untimed"] for r in rows if "failed" in r or "untimed" in r)
              for mode, rows in by_mode.items()
              if any("failed" in r for r in rows) or rows and all("untimed" in r for r in rows)}
    summary = {mode: summarize_timed(by_mode["target"], rows, costs, speculative=mode not in ("target", *PEERS))
               for mode, rows in by_mode.items() if mode not in failed}
    for mode, reason in failed.items():
        done = sum("failed" not in r for r in by_mode[mode])
        summary[mode] = {**dict.fromkeys(summary["target"]), "holes": done, "failed": reason}
    return {mode: summary[mode] for mode in modes}


def profile(summary: dict) -> list[str]:
    """Where each of our modes' generation time goes, per target pass; llama-server's
    time per token beside it (its passes are its own)."""
    lines = ["where the time goes (ms per target pass): mode, all, llama_decode, logits copy, the rest"]
    for mode, entry in summary.items():
        if entry.get("decode_ms_per_pass") is not None:
            total = entry["decode_ms_per_pass"] + entry["logits_ms_per_pass"] + entry["other_ms_per_pass"]
            lines.append(f"  {mode}: {total:.2f}, {entry['decode_ms_per_pass']:.2f}, "
                         f"{entry['logits_ms_per_pass']:.2f}, {entry['other_ms_per_pass']:.2f} "
                         f"({entry['other_ms_per_pass'] / total:.0%} outside llama.cpp)")
        elif mode in LLAMA_SERVER_PEERS and not entry["failed"] and entry["tokens_per_s"]:
            lines.append(f"  {mode}: {1000 / entry['tokens_per_s']:.2f} ms per token, as llama-server timed it")
    return lines


def index_line(index: IndexStats) -> str:
    if not index.ready:
        return "workspace index: off (auto drafts from the document alone)"
    files = f"{index.files} file" + ("" if index.files == 1 else "s")
    return (f"workspace index: {files}, {index.tokens:,} tokens, {index.mb:.0f} MB, built in "
            f"{index.build_s:.1f} s; auto drafts from it, auto:no-index from the document alone")


def definitions_line(with_context: str, index: dict) -> str:
    """What the prompts showed of other files (--with-context), and the definitions index."""
    if with_context != "definitions":
        return f"context: {with_context}: no definitions in the prompts (the bench opens no files: no ring chunks)"
    return (f"context: definitions: the definitions index holds {index['definitions']:,} definitions of "
            f"{index['definitions_files']} files, {index['definitions_mb']} MB, built in "
            f"{index['definitions_build_ms'] / 1000:.1f} s; a prompt shows those the code before the cursor calls, "
            "outside the hole's file")


def by_kind(records: list[dict]) -> list[str]:
    """Per mode that drafts, acceptance and tokens per target pass for each kind of hole."""
    lines = ["per hole kind (acceptance, tokens per target pass):"]
    for mode, kinds in figures_by_kind(records).items():
        if any(acceptance is not None for acceptance, _ in kinds.values()):
            cells = [f"{kind} {_number(acceptance, '2')}, {per_pass:.2f}"
                     for kind, (acceptance, per_pass) in sorted(kinds.items())]
            lines.append(f"  {mode}: " + "; ".join(cells))
    return lines if len(lines) > 1 else []


def rounds_by_match_lines(records: list[dict]) -> list[str]:
    """Per mode, n-gram rounds by match length: how many, and the tokens per round the
    tuner predicted against those it got."""
    lines = ["n-gram rounds by source and match length (rounds: tokens per round predicted / measured):"]
    for mode, buckets in rounds_by_match(records).items():
        lines.append(f"  {mode}: " + "; ".join(f"{source} {MATCH_BUCKET_NAMES[bucket]} tokens {n}: {predicted:.2f} / "
                                               f"{made:.2f}" for (source, bucket), (n, predicted, made)
                                               in buckets.items()))
        points = sum(r.get("branch_points", 0) for r in records if r["mode"] == mode)
        hits = sum(r.get("branch_hits", 0) for r in records if r["mode"] == mode)
        if points:
            lines.append(f"    rejected where the index's occurrences went on otherwise: {points}; the runner-up "
                         f"there had the target's token in {hits} (a token tree's most)")
    return lines if len(lines) > 1 else []


def trees(records: list[dict]) -> list[str]:
    """Per mode that verified token trees: how many passes did, their extra rows, and
    how often a branch carried the round."""
    lines = []
    for mode in dict.fromkeys(r["mode"] for r in records):
        mine = [r for r in records if r["mode"] == mode]
        rounds = sum(r.get("tree_rounds", 0) for r in mine)
        if rounds:
            passes = sum(r.get("passes", 0) for r in mine)
            lines.append(f"  {mode}: {rounds} of {passes} passes verified branches, "
                         f"{sum(r['branch_rows'] for r in mine)} rows more; a branch carried "
                         f"{sum(r['branches_taken'] for r in mine)}")
    return ["token trees (drafting.tree_branches):", *lines] if lines else []


def notes(summary: dict, records: list[dict], profiled: bool) -> list[str]:
    """The lines under the table: failed peers, the verdict against llama-server, the
    figures per hole kind, and when `profiled`, where the time goes and the rounds by
    match length."""
    more = [*profile(summary), *rounds_by_match_lines(records)] if profiled else []
    return [line for line in [*failures(summary), verdict(summary), *by_kind(records), *trees(records), *more]
            if line]


def verdict(summary: dict) -> str | None:
    """`auto` against the fastest llama-server configuration, and our plain decoding
    against llama-server's (our per-token overhead); None without both."""
    ran = {m: e for m, e in summary.items() if m in LLAMA_SERVER_PEERS and not e["failed"]}
    if not ran or "auto" not in summary:
        return None
    best = max(ran, key=lambda m: ran[m]["tokens_per_s"])
    auto, peer = summary["auto"], ran[best]
    line = (f"auto against the fastest llama-server, {best}: {auto['tokens_per_s'] / peer['tokens_per_s']:.2f}x its "
            f"tokens/s, {auto['median_speedup_vs_target'] / peer['median_speedup_vs_target']:.2f}x its median "
            "per-hole speedup")
    if LLAMA_SERVER in ran:
        line += (f"; target against {LLAMA_SERVER} (plain decoding both): "
                 f"{summary['target']['tokens_per_s'] / ran[LLAMA_SERVER]['tokens_per_s']:.2f}x its tokens/s")
    return line


def _number(value, style: str) -> str:
    if value is None:
        return "-"
    return {"x": f"{value:.2f}x", "%": f"{value:.0%}", "ms": f"{value:.0f}", "2": f"{value:.2f}",
            "1": f"{value:.1f}", "n": f"{value}"}[style]


# (header, summary key, format); the table stays readable without colour: all of it is text.
COLUMNS = [("tok/s", "tokens_per_s", "1"), ("wall tok/s", "wall_tokens_per_s", "1"),
           ("speedup", "speedup_vs_target", "x"), ("median", "median_speedup_vs_target", "x"),
           ("p50 ms", "p50_ms", "ms"), ("p95 ms", "p95_ms", "ms"),
           ("accept", "acceptance_rate", "2"), ("tok/pass", "tokens_per_pass", "2"),
           ("E pred", "predicted_tokens_per_pass", "2"), ("E meas", "measured_tokens_per_round", "2"),
           ("identical", "identical_rate", "%"), ("ties", "near_tie_flips", "n"), ("other", "other_differences", "n"),
           ("exact", "exact_match", "%"), ("edit sim", "edit_similarity", "2"), ("ident", "identifier_match", "%"),
           ("free verify*", "projected_free_verify_speedup", "x")]
TABLE_WIDTH = 208  # columns the table needs; a narrower console would fold every cell


# `bench --edits`: a suggestion is judged whole (its edits make the commit's file, or it
# suggests no edit); prediction E and edit similarity do not apply to it.
EDIT_COLUMNS = [column for column in COLUMNS if column[1] not in ("wall_tokens_per_s", "predicted_tokens_per_pass",
                                                                 "measured_tokens_per_round", "edit_similarity",
                                                                 "identifier_match")]
EDIT_COLUMNS.insert(EDIT_COLUMNS.index(("exact", "exact_match", "%")) + 1, ("no edit", "no_edit_rate", "%"))


def headers(columns: list[tuple[str, str, str]] = COLUMNS) -> list[str]:
    return ["mode", *(header for header, _, _ in columns)]


def rows(summary: dict, columns: list[tuple[str, str, str]] = COLUMNS) -> list[list[str]]:
    """Per mode, its name and each column's value as the table shows it."""
    return [[mode, *(_number(entry[key], style) for _, key, style in columns)] for mode, entry in summary.items()]


def json_rows(summary: dict, columns: list[tuple[str, str, str]] = COLUMNS) -> list[dict]:
    """The table's data for scripts: per mode, each column's value unrounded, under its summary key."""
    return [{"mode": mode, "failed": entry["failed"], **{key: entry[key] for _, key, _ in columns}}
            for mode, entry in summary.items()]


def failures(summary: dict) -> list[str]:
    """A line per peer that failed, with why (shown under the table, whose row for it is
    empty), and per peer left untimed on some holes, which and why (its row is of the rest)."""
    failed = [f"{mode} failed after {entry['holes']} holes: {entry['failed']}"
              for mode, entry in summary.items() if entry["failed"]]
    untimed = [f"{mode} not timed on {len(entry['untimed_holes'])} of "
               f"{len(entry['untimed_holes']) + entry['holes']} holes (hole "
               f"{', '.join(str(hole + 1) for hole in entry['untimed_holes'])}; its row is of the rest, against "
               f"target's on them): {entry['untimed']}"
               for mode, entry in summary.items() if entry.get("untimed")]
    return failed + untimed


def table(summary: dict, title: str, columns: list[tuple[str, str, str]] = COLUMNS) -> Table:
    result = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    result.add_column("mode", no_wrap=True)
    for header, _, _ in columns:
        result.add_column(header, justify="right", no_wrap=True)
    for row in rows(summary, columns):
        result.add_row(*row)
    return result


FOOTNOTE = ("* projection, not a measurement: the same rounds if a verify pass cost one decode step, as for a "
            "memory-bound target on a GPU. wall tok/s: with the peers' HTTP round trip (llama-server's own timing "
            "in tok/s). speedup: tokens/s over target's in the same run; median: of per-hole "
            "speedups. pred E: the Leviathan formula's tokens per round from the estimated acceptance; meas E: "
            "what the rounds made. identical: same tokens as target; ties: differences that start where the two "
            "tokens nearly tie in target's logits (numerics; none with --exact), other: the rest. "
            "exact: first line equal to the file's; edit sim: similarity to the file's text; ident: of the "
            "identifiers the file's text writes that another file defines (cross-file), the share the completion "
            "writes, per hole with any.")
EDIT_FOOTNOTE = ("* projection, not a measurement: the same rounds if a verify pass cost one decode step, as for a "
                 "memory-bound target on a GPU. speedup: tokens/s over target's on the same rewrite (every mode makes "
                 "target's tokens); median: of per-edit speedups; p50/p95 ms: one suggestion, its prompt cached. "
                 "identical, ties, other: as for inline holes. exact: the suggestion's edits make the commit's file; "
                 "no edit: the region written again unchanged; the rest were not whole rewrites (cut by the budget, "
                 "or the region emptied), which the editor is not shown.")


def model_files(files: ModelFiles) -> str:
    """The model files a run used, as its table's title (and `completer complete --stats`) names them."""
    target, draft = files.names
    return f"target {target}, " + (f"draft {draft}" if draft else "no draft model")


def typing_line(t: dict, files: int) -> str:
    """The typing replay's summary (bench --typing) in one line."""
    return (f"typing replay over {files} files, {t['keystrokes']} keystrokes ({t['forward_cache_hits']} answered by "
            f"the forward cache): cached p50 {t['cached_p50_ms']:.0f} ms / p95 {t['cached_p95_ms']:.0f} ms (model "
            f"calls {t['cached_model_p50_ms']:.0f} / {t['cached_model_p95_ms']:.0f} ms); cold p50 "
            f"{t['cold_p50_ms']:.0f} / p95 {t['cold_p95_ms']:.0f} ms; prompt tokens evaluated per keystroke "
            f"{t['tokens_per_keystroke']:.2f} (max {t['max_tokens_per_keystroke']})")


def plot(path: Path, summary: dict, records: list[dict]) -> None:
    """Speedup per mode (median per hole, and overall), and acceptance per hole kind."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise SystemExit("--plot needs matplotlib: pip install 'completer[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    modes = [mode for mode, entry in summary.items() if not entry["failed"]]
    xs = range(len(modes))
    left.bar([x - 0.2 for x in xs], [summary[m]["speedup_vs_target"] for m in modes], 0.4, label="overall")
    left.bar([x + 0.2 for x in xs], [summary[m]["median_speedup_vs_target"] for m in modes], 0.4,
             label="median per hole")
    left.axhline(1.0, color="black", linewidth=0.8)
    left.set_xticks(list(xs), modes, rotation=20, ha="right")
    left.set_ylabel("speedup vs target")
    left.set_title("tokens/s relative to plain decoding")
    left.set_ylim(0, 1.3 * max(max(summary[m]["speedup_vs_target"], summary[m]["median_speedup_vs_target"])
                               for m in modes))  # room for the legend above the bars
    left.legend(loc="upper right", ncol=2)
    by_kind = acceptance_by_kind(records)
    kinds = sorted({kind for kinds in by_kind.values() for kind in kinds})
    width = 0.8 / max(1, len(by_kind))
    for i, (mode, rates) in enumerate(sorted(by_kind.items())):
        right.bar([k + i * width for k in range(len(kinds))], [rates.get(kind, 0.0) for kind in kinds], width,
                  label=mode)
    right.set_xticks([k + 0.4 - width / 2 for k in range(len(kinds))], kinds)
    right.set_ylim(0, 1.25)
    right.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    right.set_ylabel("drafted tokens accepted")
    right.set_title("acceptance per hole kind")
    right.legend(loc="upper center", ncol=4)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)

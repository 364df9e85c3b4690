"""The README's headline figures, measured on the code as it is, in one run.

    python -m benchmarks.headline [--quick] [--output FILE] [--llama-server PATH] [--preset smol]

Algorithm:
    speculation  `completer bench`'s runner (completer.bench.run.Bench) on `holes` holes
                 of the standard library (seed 1: `completer bench STDLIB --n N` picks the
                 same), `max_tokens` tokens each, T=0, the MODES below alternating per hole;
                 `auto` drafts from the workspace index of the standard library as well,
                 `auto:no-index` from the document alone
    typing       completer.bench.keystrokes' replay (what `completer bench --typing` runs) on
                 the first 7,000 characters of `typed_files`: keystrokes the model
                 answered against the same requests from empty caches
    warming      benchmarks.warm's first completion at its line of a 2,000-line file,
                 asked WAIT_S after opening, with completer/warm sent at the open and
                 without, through the real server process, `warm_trials` trials
Then the table, in Markdown: the date, the machine (CPU, cores, the SIMD flags that pick
llama.cpp's kernels), the commit, and every ratio as a speed that says faster or slower.
"""

import argparse
import asyncio
import datetime
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pytest_lsp import ClientServerConfig

from benchmarks import warm
from benchmarks.lsp_typing import initialize_as_vscode
from completer.bench import LLAMA_SERVER, NO_INDEX, report
from completer.bench.holes import pick_holes
from completer.bench.keystrokes import replay
from completer.bench.run import Bench, Settings
from completer.config import Config, ContextOptions, GenerationOptions, ModelOptions
from completer.loading import Pair, load_pair
from completer.models.llama_build import BUILD_COMMAND, find

REPO = Path(__file__).resolve().parent.parent
STDLIB = Path(sysconfig.get_paths()["stdlib"])
# llama-server's plain decoding and its n-gram configurations. Its draft configurations
# are left out for time: on the smol pair (whose draft is untrained) they ran far below
# plain decoding (docs/bench.md).
SERVER_MODES = (LLAMA_SERVER, f"{LLAMA_SERVER}:ngram-mod", f"{LLAMA_SERVER}:ngram-simple")
MODES = ("target", "auto", NO_INDEX, *SERVER_MODES)
TYPED_CHARACTERS = 7000  # of each typed file: prompts of about 1,800 tokens, as docs/typing.md
WAIT_S = 3.0  # between opening the long file and asking (a user reading before typing)
SEED = 1  # completer bench's default: the same holes as its runs on the standard library


@dataclass(frozen=True)
class Size:
    holes: int
    max_tokens: int
    typed_files: tuple[str, ...]
    warm_trials: int


# Full: sized to run within an hour on a 2-core laptop CPU: a hole costs five prefills of
# its prompt (ours twice, llama-server's three times) and six generations of 48 tokens
# (docs/bench.md, "The README's headline", has the arithmetic on a measured machine).
# Quick: a check that everything runs, not figures to quote.
FULL = Size(holes=40, max_tokens=48, typed_files=("textwrap.py", "shlex.py"), warm_trials=4)
QUICK = Size(holes=3, max_tokens=24, typed_files=("textwrap.py",), warm_trials=1)


@dataclass(frozen=True)
class Measured:
    """One run's measurements, as the table writer reads them: plain data."""

    date: str  # ISO
    # completer.bench.report.machine(), with "simd": simd_flags() of this CPU and "threads":
    # those llama.cpp's contexts ran with, read back from every engine of the bench
    machine: dict
    commit: str  # the short hash, "+changes" when the work tree differed from it
    preset: str
    size: Size
    quick: bool
    summary: dict  # mode -> its entry, as completer.bench.report.summarize makes it
    index: dict  # the workspace index's IndexStats
    typing_replay: dict  # completer.bench.keystrokes' replay: its summary
    warm: dict[str, list[float]]  # "cold" and "warm" -> first-completion ms, per trial


# Where each row's figures are explained, relative to the README.
BENCH_PAGE = "[bench](docs/bench.md#beside-llama-server)"
INDEX_PAGE = "[bench](docs/bench.md#the-workspace-index-and-long-copies)"
TYPING_PAGE = "[typing](docs/typing.md)"
WARMING_PAGE = "[typing](docs/typing.md#warming)"
ELSEWHERE = ("Not measured by this command (each has its own command, and its page gives the date and machine): "
             "keystrokes through the language server ([lsp-typing](docs/lsp-typing.md)), resident memory over "
             "10,000 keystrokes ([soak](docs/soak.md)), a distilled draft ([distill](docs/distill.md)), token "
             "healing ([healing](docs/healing.md)).")


def faster(ratio: float) -> str:
    """A ratio of speeds, ours over the other's, that says which way it went: a loss
    reads as one ("0.95x (slower)")."""
    shown = f"{ratio:.2f}x"
    if shown == "1.00x":
        return f"{shown} (even)"
    return f"{shown} ({'faster' if ratio > 1 else 'slower'})"


def quicker(ours_ms: float, theirs_ms: float) -> str:
    """Two latencies as a ratio of speeds (theirs over ours: above 1, ours came sooner)."""
    return faster(theirs_ms / ours_ms) if ours_ms > 0 else "not measured (no time)"


def simd_flags(cpuinfo: str) -> list[str] | None:
    """The first CPU's flags that choose llama.cpp's x86 kernels (AVX2, every AVX-512
    one, AMX), from /proc/cpuinfo's text; None without a flags line (not x86 Linux)."""
    line = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), None)
    if line is None:
        return None
    flags = line.partition(":")[2].split()
    return sorted(flag for flag in flags if flag == "avx2" or flag.startswith(("avx512", "amx")))


def simd_text(flags: list[str] | None) -> str:
    if flags is None:
        return "SIMD flags unknown: no /proc/cpuinfo flags"
    missing = [f"no {family}" for family in ("avx2", "avx512", "amx") if not any(f.startswith(family) for f in flags)]
    return ", ".join(flags + missing)


def machine_line(machine: dict) -> str:
    """The CPU, its cores and SIMD flags, the threads llama.cpp ran with, GPU offload, the platform."""
    gpu = "GPU offload built in" if machine["gpu_offload"] else "no GPU offload"
    threads = "/".join(map(str, machine["threads"]))
    return (f"{machine['cpu']}, {machine['cores']} cores ({simd_text(machine['simd'])}), llama.cpp on {threads} "
            f"threads, {gpu}; {machine['platform']}; llama-cpp-python {machine['llama_cpp_python']}")


def commit_label(head: str, status: str) -> str:
    """The commit, and "+changes" when `git status --porcelain` listed anything."""
    return head + ("+changes" if status.strip() else "")


def speculation_rows(summary: dict, index: dict) -> list[tuple[str, str, str]]:
    """What speculation buys: against plain decoding, with the index against without,
    against llama-server's fastest configuration, and plain decoding on both sides."""
    auto, target = summary["auto"], summary["target"]
    rows = [("`auto` against plain decoding (`target`): tokens/s, and the median of the per-hole ratios",
             f"{faster(auto['speedup_vs_target'])}; median {faster(auto['median_speedup_vs_target'])}", BENCH_PAGE),
            (f"the workspace index ({index['files']:,} files, {index['tokens']:,} tokens): `auto` against "
             f"`{NO_INDEX}`, which drafts from the document alone",
             faster(auto["tokens_per_s"] / summary[NO_INDEX]["tokens_per_s"]), INDEX_PAGE)]
    servers = {mode: entry for mode, entry in summary.items() if mode in SERVER_MODES}
    ran = {mode: entry for mode, entry in servers.items() if not entry["failed"]}
    if ran:
        best = max(ran, key=lambda mode: ran[mode]["tokens_per_s"])
        rows.append((f"`auto` against llama-server's fastest configuration here, `{best}` (of "
                     f"{', '.join(f'`{mode}`' for mode in ran)})",
                     f"{faster(auto['tokens_per_s'] / ran[best]['tokens_per_s'])} its tokens/s", BENCH_PAGE))
    if LLAMA_SERVER in ran:
        rows.append((f"our plain decoding (`target`) against llama-server's (`{LLAMA_SERVER}`)",
                     f"{faster(target['tokens_per_s'] / ran[LLAMA_SERVER]['tokens_per_s'])} its tokens/s",
                     BENCH_PAGE))
    rows += [(f"`{mode}`", f"failed after {entry['holes']} holes: {entry['failed']}", BENCH_PAGE)
             for mode, entry in servers.items() if entry["failed"]]
    return rows


def typing_row(replay: dict) -> tuple[str, str, str]:
    model = replay["cached_model_p50_ms"], replay["cached_model_p95_ms"]
    cold = replay["cold_p50_ms"], replay["cold_p95_ms"]
    return (f"typing ({replay['keystrokes']} keystrokes): a keystroke the model answered, against the same request "
            "from empty caches, p50 / p95",
            f"{model[0]:.0f} / {model[1]:.0f} ms against {cold[0]:.0f} / {cold[1]:.0f} ms: "
            f"{quicker(model[0], cold[0])} / {quicker(model[1], cold[1])}", TYPING_PAGE)


def warming_row(times: dict[str, list[float]]) -> tuple[str, str, str]:
    warmed, cold = statistics.median(times["warm"]), statistics.median(times["cold"])
    return (f"first completion at line {warm.CURSOR_LINE:,} of a {warm.LINES:,}-line file asked {WAIT_S:g} s after "
            f"opening: warmed (`completer/warm` at the open) against cold, median of {len(times['warm'])}",
            f"{warmed:.0f} ms against {cold:.0f} ms: {quicker(warmed, cold)}", WARMING_PAGE)


def markdown(measured: Measured) -> str:
    """The headline: what ran where, the table, and where the other figures live."""
    size = measured.size
    quick = " (`--quick`: a check that it runs, not figures to quote)" if measured.quick else ""
    intro = (f"Measured {measured.date} by `python -m benchmarks.headline`{quick} at commit {measured.commit}, on "
             f"{machine_line(measured.machine)}. The {measured.preset} pair; {size.holes} holes of the standard "
             f"library, {size.max_tokens} tokens each at T=0, every mode and llama-server configuration alternating "
             "per hole. Every ratio is a speed, ours over the other's: above 1 is faster, below 1 slower, and the "
             "figure says which.")
    rows = [*speculation_rows(measured.summary, measured.index), typing_row(measured.typing_replay),
            warming_row(measured.warm)]
    table = ["| what | figure | page |", "|---|---|---|", *(f"| {' | '.join(row)} |" for row in rows)]
    return "\n\n".join([intro, "\n".join(table), ELSEWHERE]) + "\n"


def progress(started: float, what: str) -> None:
    print(f"[{time.monotonic() - started:5.0f} s] {what}", file=sys.stderr, flush=True)


def speculation(pair: Pair, models: ModelOptions, size: Size, llama_server: Path, started: float
                ) -> tuple[dict, dict, list[int]]:
    """The bench's modes and peers on the standard library's holes: its summary, the
    index's stats, and the thread counts its engines' contexts ran with."""
    holes = pick_holes([STDLIB], size.holes, SEED)
    # No definitions in the prompts: the figures stay those of the prompts the README's
    # table was measured with (the cross-file holes in docs/bench.md measure definitions).
    config = Config(models=models, generation=GenerationOptions(max_tokens=size.max_tokens, temperature=0.0),
                    context=ContextOptions(definitions_tokens=0))
    progress(started, "indexing the standard library, measuring the verify cost, starting llama-server")
    runner = Bench(pair, Settings(config, MODES), llama_server=llama_server,
                   roots=sorted({Path(hole.root) for hole in holes}))
    threads = sorted({count for counts in runner.threads.values() for count in counts})
    records = []
    try:
        for number, hole in enumerate(holes):
            records += runner.run_hole(number, hole)
            progress(started, f"hole {number + 1}/{len(holes)} ({hole.file}, {hole.kind})")
    finally:  # llama-server's processes stop, also on Ctrl-C
        runner.close()
    return report.summarize(records, MODES, runner.engine.costs), asdict(runner.index_stats), threads


def replay_typing(pair: Pair, models: ModelOptions, size: Size) -> dict:
    files = [(name, (STDLIB / name).read_text()[:TYPED_CHARACTERS], "py") for name in size.typed_files]
    return replay(pair, models, files)[0]


async def warming(preset: str, trials: int, started: float) -> dict[str, list[float]]:
    """benchmarks.warm's cold and warmed cases after WAIT_S, each trial on files not seen before."""
    server = [str(Path(sys.executable).with_name("completer")), "serve", "--stdio"]
    client = await ClientServerConfig(server_command=server).start()
    await initialize_as_vscode(client, preset)
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    try:
        for trial in range(trials):
            cases = ("cold", "warm") if trial % 2 == 0 else ("warm", "cold")  # machine drift hits both alike
            for number, case in enumerate(cases):
                uri = Path(tempfile.gettempdir(), f"headline-warm-{trial}-{number}.py").as_uri()
                text = warm.long_file(trial * len(cases) + number)
                times[case].append(await warm.first_completion_ms(client, uri, text, case == "warm", WAIT_S))
                progress(started, f"warming trial {trial + 1}/{trials}, {case}: {times[case][-1]:.0f} ms")
    finally:
        await client.shutdown_session()
    return times


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def measure(preset: str, size: Size, quick: bool, llama_server: Path) -> Measured:
    started = time.monotonic()
    date, commit = datetime.date.today().isoformat(), commit_label(git("rev-parse", "--short", "HEAD"),
                                                                   git("status", "--porcelain"))
    cpuinfo = Path("/proc/cpuinfo")
    simd = simd_flags(cpuinfo.read_text()) if cpuinfo.is_file() else None
    models = ModelOptions(preset=preset)
    pair = load_pair(models)
    summary, index, threads = speculation(pair, models, size, llama_server, started)
    progress(started, "typing replay")
    typed = replay_typing(pair, models, size)
    progress(started, "warming, through the server")
    times = asyncio.run(warming(preset, size.warm_trials, started))
    progress(started, "done")
    machine = {**report.machine(), "simd": simd, "threads": threads}
    return Measured(date, machine, commit, preset, size, quick, summary, index, typed, times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=Path, help="write the Markdown here (default: print it)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.holes} holes of {QUICK.max_tokens} tokens, one "
                        "typed file, one warming trial: a few minutes, to check that it runs")
    parser.add_argument("--llama-server", type=Path, help="the llama-server to compare with (default: as bench finds "
                        "it: $COMPLETER_LLAMA_SERVER, else the one `completer build` made)")
    parser.add_argument("--preset", default="smol")
    args = parser.parse_args()
    llama_server = find(args.llama_server)
    if llama_server is None:
        parser.error(f"the headline compares with llama-server: `{BUILD_COMMAND}` builds one, or give --llama-server")
    text = markdown(measure(args.preset, QUICK if args.quick else FULL, args.quick, llama_server))
    if args.output:
        args.output.write_text(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()

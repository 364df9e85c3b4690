"""The first completion after opening a long file, with and without completer/warm,
through the real server process.

    python -m benchmarks.warm [--trials 4] [--wait 3] [--early 0.5] [--preset smol]

Algorithm:
    start `completer serve --stdio` with pytest-lsp's client (as VS Code), options
        {"models": {"preset": P}, "generation": {"max_tokens": 16, "time_budget_ms": 0}}
    per trial, for each case in an order rotated per trial (machine drift hits all alike):
        open a 2,000-line file not seen before (standard-library modules end to end,
        starting at another module each time, so that no cache holds any of it)
        "warm"  send completer/warm at line 1,500, as the editor does when a file is
                opened or made active
        wait `wait` seconds (a user reading before typing), or `early` seconds for the
        cases that ask while warming is still under way
        time textDocument/inlineCompletion at line 1,500 to its answer
Report each case's median and the ratios of the medians: warmed against cold after
`wait`, and warming-still-running against cold after `early` (never slower, the goal).
"""

import argparse
import asyncio
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pytest_lsp import ClientServerConfig

from benchmarks.lsp_typing import initialize_as_vscode
from completer.lsp import protocol

MODULES = ("argparse.py", "configparser.py", "typing.py", "textwrap.py", "tarfile.py", "zipfile.py", "pathlib.py",
           "inspect.py", "dataclasses.py", "difflib.py")
LINES, CURSOR_LINE = 2000, 1500
CASES = ("cold", "warm", "cold early", "warm early")


def long_file(trial: int) -> str:
    """2,000 lines of real Python, starting at another module each trial."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    lines: list[str] = []
    for name in MODULES[trial % len(MODULES):] + MODULES[: trial % len(MODULES)]:
        lines += (stdlib / name).read_text().split("\n")
    return "\n".join(lines[:LINES])


async def first_completion_ms(client, uri: str, text: str, warm: bool, wait_s: float) -> float:
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", 1, text)))
    position = {"line": CURSOR_LINE, "character": 0}
    if warm:
        client.protocol.notify(protocol.WARM, {"textDocument": {"uri": uri}, "position": position})
    await asyncio.sleep(wait_s)
    started = time.perf_counter()
    await client.text_document_inline_completion_async(types.InlineCompletionParams(
        context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic),
        text_document=types.TextDocumentIdentifier(uri), position=types.Position(CURSOR_LINE, 0)))
    ms = (time.perf_counter() - started) * 1000
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))
    return ms


async def run(args: argparse.Namespace) -> None:
    server = [str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "completer"), "serve", "--stdio"]
    client = await ClientServerConfig(server_command=server).start()
    await initialize_as_vscode(client, args.preset)
    times: dict[str, list[float]] = {case: [] for case in CASES}
    for trial in range(args.trials):
        order = CASES[trial % len(CASES):] + CASES[: trial % len(CASES)]
        for number, case in enumerate(order):
            uri = Path(tempfile.gettempdir(), f"warm-{trial}-{number}.py").as_uri()
            text = long_file(trial * len(CASES) + number)
            wait = args.early if case.endswith("early") else args.wait
            times[case].append(await first_completion_ms(client, uri, text, case.startswith("warm"), wait))
            print(f"trial {trial + 1}, {case}: {times[case][-1]:.0f} ms", flush=True)
    final = (await client.protocol.send_request_async(protocol.STATS, None))._asdict()
    await client.shutdown_session()
    median = {case: statistics.median(values) for case, values in times.items()}
    print(f"\nfirst completion at line {CURSOR_LINE} of a {LINES}-line file, median of {args.trials} "
          f"({args.preset}, 16 tokens):")
    for case in CASES:
        print(f"  {case:11s} {median[case]:6.0f} ms  ({', '.join(f'{t:.0f}' for t in times[case])})")
    print(f"warmed / cold, asked {args.wait:g} s after opening: {median['warm'] / median['cold']:.2f}x")
    print(f"warming still running / cold, asked {args.early:g} s after opening: "
          f"{median['warm early'] / median['cold early']:.2f}x")
    print(f"server: {final['warmed_tokens']} prompt tokens evaluated ahead, cache hits {final['cache_hit_rate']:.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--wait", type=float, default=3.0, help="seconds between opening and asking")
    parser.add_argument("--early", type=float, default=0.5, help="the same, for asking while warming runs")
    parser.add_argument("--preset", default="smol")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

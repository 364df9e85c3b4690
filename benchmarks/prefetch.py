"""Tab to the next suggestion: the completion after an accepted one, with and without
lsp.prefetch, through the real server process.

    python -m benchmarks.prefetch [--holes 20] [--read 1.0] [--file difflib.py] [--preset smol]

Algorithm:
    start two `completer serve --stdio` with pytest-lsp's client (as VS Code), one per
        case (lsp.prefetch on, off), so that neither case finds in its caches what the
        other evaluated; options
        {"models": {"preset": P}, "generation": {"max_tokens": 16, "time_budget_ms": 0}}
    holes: `holes` cuts inside non-blank lines of a standard-library module, spread
        evenly over it; the document is the module up to the cut (the cursor ends its line)
    per hole, for each case in an order that alternates per hole (machine drift hits both
    alike), on that case's server:
        open the document under a new URI, ask for the suggestion at its end
        wait `read` seconds (a user reading it)
        accept it as Tab does: didChange putting the item's text in, the cursor after it
        time textDocument/inlineCompletion at the new end to its answer
        close the document (which stops anything still computed for it), and wait 0.2 s
Report each case's p50 / p95 of Tab to answer, the ratio of the medians as a speed, and
how many answers the prefetch served. Holes with nothing shown at the cut are skipped.
"""

import argparse
import asyncio
import statistics
import sysconfig
import time
from pathlib import Path

from lsprotocol import types
from pytest_lsp import ClientServerConfig

from benchmarks.lsp_typing import initialize_as_vscode
from completer.lsp import protocol

CASES = ("prefetch", "no prefetch")


def holes(text: str, count: int) -> list[str]:
    """`count` documents: `text` cut in the middle of non-blank lines spread over it."""
    lines = text.split("\n")
    candidates = [i for i, line in enumerate(lines) if len(line.strip()) > 8]
    documents = []
    for n in range(count):
        i = candidates[(2 * n + 1) * len(candidates) // (2 * count)]
        indent = len(lines[i]) - len(lines[i].lstrip())
        documents.append("\n".join(lines[:i] + [lines[i][: (indent + len(lines[i])) // 2]]))  # half the code
    return documents


def end_of(text: str) -> types.Position:
    lines = text.split("\n")
    return types.Position(len(lines) - 1, len(lines[-1]))  # ASCII modules: characters are UTF-16 units


async def inline(client, uri: str, position: types.Position) -> types.InlineCompletionList | None:
    return await client.text_document_inline_completion_async(types.InlineCompletionParams(
        context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic),
        text_document=types.TextDocumentIdentifier(uri), position=position))


async def stats(client) -> dict:
    return (await client.protocol.send_request_async(protocol.STATS, None))._asdict()


async def tab_to_next_ms(client, uri: str, text: str, read_s: float) -> tuple[float, bool] | None:
    """Tab to the next answer, ms, and whether the prefetch served it; None when nothing
    was shown to accept."""
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", 1, text)))
    try:
        shown = await inline(client, uri, end_of(text))
        if not shown or not shown.items:
            return None
        await asyncio.sleep(read_s)
        hits = (await stats(client))["prefetch_hits"]
        item = shown.items[0]
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=2, uri=uri),
            [types.TextDocumentContentChangePartial(item.range, item.insert_text)]))
        started = time.perf_counter()
        await inline(client, uri, end_of(text + item.insert_text))
        ms = (time.perf_counter() - started) * 1000
        return ms, (await stats(client))["prefetch_hits"] > hits
    finally:
        client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))


async def run(args: argparse.Namespace) -> None:
    module = Path(sysconfig.get_paths()["stdlib"]) / args.file
    documents = holes(module.read_text(), args.holes)
    server = [str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "completer"), "serve", "--stdio"]
    clients = {}
    for case in CASES:
        clients[case] = await ClientServerConfig(server_command=server).start()
        await initialize_as_vscode(clients[case], args.preset)
        clients[case].workspace_did_change_configuration(types.DidChangeConfigurationParams(
            {"completer": {"lsp": {"prefetch": case == "prefetch"}}}))
    times: dict[str, list[float]] = {case: [] for case in CASES}
    served = {case: 0 for case in CASES}
    skipped = 0
    for number, document in enumerate(documents):
        order = CASES if number % 2 == 0 else CASES[::-1]
        for case in order:
            uri = Path("/tmp", f"prefetch-{number}.py").as_uri()
            result = await tab_to_next_ms(clients[case], uri, document, args.read)
            await asyncio.sleep(0.2)
            if result is None:
                skipped += 1
                continue
            times[case].append(result[0])
            served[case] += result[1]
            served_by = " (prefetched)" if result[1] else ""
            print(f"hole {number + 1}, {case}: {result[0]:.0f} ms{served_by}", flush=True)
    for client in clients.values():
        await client.shutdown_session()
    print(f"\nTab to the next suggestion, {args.file}, {args.holes} holes ({skipped} answers with nothing to accept "
          f"skipped), {args.preset}, 16 tokens, {args.read:g} s reading each suggestion:")
    median = {}
    for case in CASES:
        values = sorted(times[case])
        median[case] = statistics.median(values)
        p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
        print(f"  {case:12s} p50 {median[case]:5.0f} ms  p95 {p95:5.0f} ms  ({len(values)} answers, "
              f"{served[case]} from the prefetch)")
    speedup = median["no prefetch"] / median["prefetch"]
    print(f"Tab to the next suggestion, prefetch against no prefetch: {speedup:.1f}x faster (ratio of the medians)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--holes", type=int, default=20)
    parser.add_argument("--read", type=float, default=1.0, help="seconds a suggestion is shown before Tab")
    parser.add_argument("--file", default="difflib.py", help="a standard-library module, relative to its folder")
    parser.add_argument("--preset", default="smol")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

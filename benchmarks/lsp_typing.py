"""Keystroke to inline completion over LSP, through the real server process.

    python -m benchmarks.lsp_typing [--file textwrap.py] [--chars 7000] [--preset smol] [--log FILE]

Algorithm:
    start `completer serve --stdio` with pytest-lsp's client (as VS Code), options
        {"models": {"preset": P}, "generation": {"max_tokens": 16, "time_budget_ms": 0}}
    open the first `chars` characters of a standard library file; wait until ready
    type a line of code in the middle of it, one incremental didChange per character,
    each followed by textDocument/inlineCompletion at the cursor
    time each keystroke from the didChange to the completion's answer
Report p50/p95 over the keystrokes, with and without the forward cache's answers,
and the server's completer/stats. With --log, write the session's messages (the
first keystrokes) as a transcript.
"""

import argparse
import asyncio
import json
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np
from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from completer.lsp import protocol
from completer.models.paths import cache_dir

TYPED = "        width = max(len(line) for line in lines) if lines else 0\n"


async def initialize_as_vscode(client, preset: str) -> None:
    """Initialize the server as VS Code would, with the preset and 16 tokens a completion
    under no time budget, and wait until its models are ready."""
    await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"),
        initialization_options={"models": {"preset": preset}, "generation": {"max_tokens": 16, "time_budget_ms": 0}}))
    while not (await client.protocol.send_request_async(protocol.STATS, None)).ready:
        await asyncio.sleep(0.2)


async def run(args: argparse.Namespace) -> None:
    text = (Path(sysconfig.get_paths()["stdlib"]) / args.file).read_text()[: args.chars]
    server = [str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "completer"), "serve", "--stdio"]
    client = await ClientServerConfig(server_command=server).start()
    transcript: list[str] = []
    recording = False  # from the didOpen on, for the first messages

    def record(direction: str, message) -> None:
        if recording and len(transcript) < 14:
            data = json.dumps(client.protocol._serialize_message(message), default=str, ensure_ascii=False)
            transcript.append(f"{direction} {data[:400]}")

    if args.log:
        send, receive = client.protocol._send_data, client.protocol.handle_message
        client.protocol._send_data = lambda data: (record("client ->", data), send(data))[1]
        client.protocol.handle_message = lambda message: (record("server ->", message), receive(message))[1]
    await initialize_as_vscode(client, args.preset)
    uri = Path(tempfile.gettempdir(), args.file).as_uri()
    recording = True
    cursor = text.index("\n", len(text) // 2) + 1
    line = text[:cursor].count("\n")
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", 1, text)))

    async def complete(character: int):
        return await client.text_document_inline_completion_async(types.InlineCompletionParams(
            context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic),
            text_document=types.TextDocumentIdentifier(uri), position=types.Position(line, character)))

    await complete(0)  # the document's first completion: one full prefill
    every, model = [], []
    before = (await client.protocol.send_request_async(protocol.STATS, None)).forward_cache_hits
    for i, char in enumerate(TYPED.rstrip("\n")):
        started = time.perf_counter()
        position = types.Position(line, i)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=i + 2, uri=uri),
            [types.TextDocumentContentChangePartial(types.Range(position, position), char)]))
        await complete(i + 1)
        ms = (time.perf_counter() - started) * 1000
        every.append(ms)
        hits = (await client.protocol.send_request_async(protocol.STATS, None)).forward_cache_hits
        if hits == before:
            model.append(ms)
        before = hits
    stats = (await client.protocol.send_request_async(protocol.STATS, None))._asdict()
    await client.shutdown_session()

    def p(values, q):
        return float(np.percentile(values, q))

    print(f"{args.file}: {len(TYPED) - 1} keystrokes over LSP (didChange + inlineCompletion), preset {args.preset}, "
          f"models in {cache_dir()}")
    print("| keystroke to inline completion | keystrokes | p50 ms | p95 ms |")
    print("|---|---|---|---|")
    print(f"| every keystroke | {len(every)} | {p(every, 50):.0f} | {p(every, 95):.0f} |")
    print(f"| keystrokes the model answered | {len(model)} | {p(model, 50):.0f} | {p(model, 95):.0f} |")
    print(f"mean {statistics.mean(every):.0f} ms; server stats: " + json.dumps(
        {k: round(v, 3) if isinstance(v, float) else v for k, v in stats.items() if k not in ("target", "draft")}))
    if args.log:
        Path(args.log).write_text("\n".join(transcript) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", default="textwrap.py")
    parser.add_argument("--chars", type=int, default=7000)
    parser.add_argument("--preset", default="smol")
    parser.add_argument("--log", help="write a transcript of the first messages here")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

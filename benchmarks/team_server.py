"""A team server measured from the editor's side: llama-server with the smol pair on
127.0.0.1, driven as `completer` drives it.

    python -m benchmarks.team_server [--rounds 5] [--clients 4] [--requests 50] [--json]

Algorithm:
    switch    two standard library files as two documents, typed into in turn (one
              character, then a completion, then the other file), through
              the Completer over a ServerDecoder, on: one slot (as llama.vim and llama.vscode use a
              server), two slots the server chooses between, two slots pinned per
              document; each also with llama-server's RAM prompt cache off. Per
              request: latency and the prompt tokens the server evaluated (its
              timings); the first request of each document is the cold prompt.
    cancel    a completion that would run to 400 tokens, uncancelled and cancelled
              after 1 s (its stream closed, as a superseded request is): the tokens
              the server generated (its timings; for the cancelled one, the tokens
              its slot held when it let the task go, less the prompt).
    clients   N language servers (`completer serve --stdio`, pytest-lsp's client) on
              one llama-server with N slots and no RAM prompt cache, each typing into
              its own document (text no model predicts, so each keystroke is a model
              call), a completion after each keystroke and every fifth one asked
              twice at once: latency percentiles, answered, superseded, and
              answers naming another client's document (must be 0).
The llama-server is `completer build`'s (or $COMPLETER_LLAMA_SERVER).
"""

import argparse
import asyncio
import json
import random
import re
import statistics
import string
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from completer.config import Config, config_from_dict
from completer.decoders.clients import LlamaServerClient
from completer.decoders.server import ServerDecoder
from completer.editor.completer import Completer
from completer.loading import completer_over, server_api
from completer.lsp import protocol
from completer.models.llama_build import BUILD_COMMAND, find
from completer.models.presets import Preset
from completer.models.resolve import resolve
from completer.requests import CancelFlag, CompletionRequest, Source
from tests.llama_server_process import LlamaServer

FILES = ("textwrap.py", "shlex.py")
# The prefix a prompt takes: ~1,000 tokens, seconds of prefill on a CPU cold, so that a
# document switch that re-evaluates it shows (docs/team-server.md).
PREFIX_LINES = 96
OPTIONS = {"generation": {"max_tokens": 16, "time_budget_ms": 0}, "prompt": {"prefix_lines": PREFIX_LINES}}
LONG = "def numbers():\n    return [\n        1,\n        2,\n        3,\n        "
RELEASE = re.compile(r"release: .*stop processing: n_tokens = (\d+)")  # llama-server's log line
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def server_for(binary: Path, files, log: Path, slots: int, *args: str) -> LlamaServer:
    return LlamaServer(binary, files.target, log, "-md", str(files.draft), "--spec-type", "draft-simple", *args,
                       slots=slots, context=4096 * slots).start()


def completer_on(url: str, slot_choice: str) -> Completer:
    config, problems = config_from_dict({**OPTIONS, "models": {"decoder": "llama-server", "server_url": url,
                                                                "server_slots": slot_choice}}, Config())
    assert not problems, problems
    decoder = ServerDecoder(server_api(config.models, {}))
    assert decoder.server_model() is not None, decoder.warning
    return completer_over(decoder, config)


def switching(completer: Completer, rounds: int) -> dict:
    """Type into the two documents in turn; each request's latency and evaluated tokens."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = {name: (stdlib / name).read_text() for name in FILES}
    cursors = {name: text.index("\n", len(text) // 3) for name, text in texts.items()}  # a line end, a third in
    cold, back = [], []
    for round_ in range(rounds):
        for name in FILES:
            text, cursor = texts[name], cursors[name]
            texts[name] = text[:cursor] + "#" + text[cursor:]  # one keystroke: not what was shown
            cursors[name] += 1
            completer.documents.forget_shown(name)  # every request goes to the server, none to the forward cache
            started = time.perf_counter()
            completion = completer.complete(CompletionRequest(name, name, texts[name], cursors[name], "py"))
            elapsed = (time.perf_counter() - started) * 1000
            assert completion.source == Source.MODEL and completion.result.timings, completion
            remote = completion.result
            (cold if round_ == 0 else back).append((elapsed, remote.tokens_evaluated, remote.tokens_cached))
    return {"cold_ms": statistics.median(c[0] for c in cold), "cold_evaluated": statistics.median(c[1] for c in cold),
            "prompt_tokens": statistics.median(c[1] + c[2] for c in cold),
            "switch_back_ms": statistics.median(b[0] for b in back),
            "switch_back_evaluated": statistics.median(b[1] for b in back), "switches": len(back)}


def measure_switches(binary: Path, files, rounds: int, folder: Path) -> list[dict]:
    rows = []
    for label, slots, choice, cache_ram in [("one slot (llama.vim's way)", 1, "server", True),
                                            ("one slot, no RAM prompt cache", 1, "server", False),
                                            ("two slots, the server's choice", 2, "server", True),
                                            ("two slots, the server's choice, no RAM cache", 2, "server", False),
                                            ("two slots pinned per document", 2, "pin", True),
                                            ("two slots pinned, no RAM cache", 2, "pin", False)]:
        server = server_for(binary, files, folder / f"switch-{len(rows)}.log", slots,
                            *(() if cache_ram else ("--cache-ram", "0")))
        try:
            rows.append({"server": label, **switching(completer_on(server.url, choice), rounds)})
        finally:
            server.stop()
    return rows


def measure_cancel(binary: Path, files, folder: Path, repeats: int = 3) -> dict:
    server = server_for(binary, files, folder / "cancel.log", 1)
    client = LlamaServerClient(server.url)
    prompt = client.tokenize(LONG, False)
    try:
        whole = [client.complete(prompt, 400, 0).timings["predicted_n"] for _ in range(repeats)]
        cut = []
        for _ in range(repeats):
            cancel = CancelFlag()
            threading.Timer(1.0, cancel.set).start()
            assert client.complete(prompt, 400, 0, cancel=cancel).stop_reason == "cancelled"
            while client.slots()[0]["is_processing"]:
                time.sleep(0.05)
            # The slot's tokens when the server let the task go: the prompt and what it generated.
            held = RELEASE.findall(server.log.read_text())[-1]
            cut.append(int(held) - len(prompt))
        log = server.log.read_text()
    finally:
        server.stop()
    return {"uncancelled_tokens": statistics.median(whole), "cancelled_tokens": statistics.median(cut),
            "cancel_tasks_logged": log.count("cancel task")}


async def typing_client(url: str, cache: Path, word: str, requests: int) -> dict:
    # Where decoding runs is machine-level: the server's flags, never initializationOptions.
    server = [str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "completer"), "serve", "--stdio",
              "--decoder", "llama-server", "--server-url", url]
    client = await ClientServerConfig(server_command=server, server_env={"COMPLETER_CACHE_DIR": str(cache)}).start()
    await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), initialization_options=OPTIONS))
    while not (await client.protocol.send_request_async(protocol.STATS, None)).ready:
        await asyncio.sleep(0.1)
    uri = f"file:///project/{word}.py"
    text = (f"def {word}_total({word}_values):\n    {word}_sum = 0\n    for {word}_item in {word}_values:\n"
            f"        {word}_sum += {word}_item\n    return {word}_sum\n\n\ndef {word}_mean({word}_values):\n    ")
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", 1, text)))
    line, column = text.count("\n"), 4
    # Letters at random, which no model predicts: each keystroke is a model call, not the forward cache.
    letters = random.Random(word)
    typed = "# " + "".join(letters.choice(string.ascii_lowercase + " ") for _ in range(requests))
    latencies, answers = [], []

    async def ask() -> None:
        started = time.perf_counter()
        result = await client.text_document_inline_completion_async(types.InlineCompletionParams(
            context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic),
            text_document=types.TextDocumentIdentifier(uri), position=types.Position(line, column)))
        latencies.append((time.perf_counter() - started) * 1000)
        answers.append(result.items[0].insert_text if result else None)

    for index in range(requests):
        position = types.Position(line, column)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=index + 2, uri=uri),
            [types.TextDocumentContentChangePartial(types.Range(position, position), typed[index % len(typed)])]))
        column += 1
        await asyncio.gather(*([ask(), ask()] if index % 5 == 4 else [ask()]))
    stats = (await client.protocol.send_request_async(protocol.STATS, None))._asdict()
    await client.shutdown_session()
    others = [other for other in WORDS if other != word]
    return {"latencies": latencies, "answered": sum(1 for a in answers if a), "empty": answers.count(None),
            "superseded": stats["superseded"], "forward_cache_hits": stats["forward_cache_hits"],
            "leaks": sum(1 for a in answers if a and any(o in a for o in others)),
            "server_error": stats["server_error"], "draft_acceptance_rate": stats["draft_acceptance_rate"]}


def measure_clients(binary: Path, files, clients: int, requests: int, folder: Path) -> dict:
    server = server_for(binary, files, folder / "clients.log", clients, "--cache-ram", "0")
    try:
        started = time.perf_counter()
        results = asyncio.run(_all(server.url, folder, clients, requests))
        wall = time.perf_counter() - started
    finally:
        server.stop()
    latencies = np.array([ms for result in results for ms in result["latencies"]])
    return {"clients": clients, "requests_each": len(results[0]["latencies"]), "wall_s": wall,
            "p50_ms": float(np.percentile(latencies, 50)), "p90_ms": float(np.percentile(latencies, 90)),
            "p99_ms": float(np.percentile(latencies, 99)),
            "answered": sum(r["answered"] for r in results), "empty": sum(r["empty"] for r in results),
            "superseded": sum(r["superseded"] for r in results), "leaks": sum(r["leaks"] for r in results),
            "forward_cache_hits": sum(r["forward_cache_hits"] for r in results),
            "server_errors": [r["server_error"] for r in results if r["server_error"]],
            "draft_acceptance_rate": statistics.mean(r["draft_acceptance_rate"] for r in results)}


async def _all(url: str, folder: Path, clients: int, requests: int) -> list[dict]:
    return await asyncio.gather(*(typing_client(url, folder / "cache", word, requests) for word in WORDS[:clients]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="switches back and forth (the first is cold)")
    parser.add_argument("--clients", type=int, default=4, choices=range(1, len(WORDS) + 1))
    parser.add_argument("--requests", type=int, default=50, help="keystrokes each client types")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    binary = find()
    if binary is None:
        raise SystemExit(f"no llama-server: run `{BUILD_COMMAND}`")
    files = resolve(Preset.from_name("smol"))
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        result = {"switch": measure_switches(binary, files, args.rounds, folder),
                  "cancel": measure_cancel(binary, files, folder),
                  "clients": measure_clients(binary, files, args.clients, args.requests, folder)}
    if args.json:
        print(json.dumps(result))
        return
    print(f"document switch: {FILES[0]} and {FILES[1]} in turn, {PREFIX_LINES} prefix lines, smol pair, "
          "median over the switches")
    print("| server | prompt tokens | cold ms | switch back ms | evaluated cold | evaluated back |")
    print("|---|---|---|---|---|---|")
    for row in result["switch"]:
        print(f"| {row['server']} | {row['prompt_tokens']:.0f} | {row['cold_ms']:.0f} | {row['switch_back_ms']:.0f} "
              f"| {row['cold_evaluated']:.0f} | {row['switch_back_evaluated']:.0f} |")
    cancel = result["cancel"]
    print(f"\ncancellation: a 400-token completion made {cancel['uncancelled_tokens']:.0f} tokens on the server; "
          f"cancelled after 1 s, {cancel['cancelled_tokens']:.0f} ({cancel['cancel_tasks_logged']} `cancel task` "
          "lines in its log)")
    clients = result["clients"]
    print(f"\n{clients['clients']} clients x {clients['requests_each']} requests on {clients['clients']} slots: "
          f"p50 {clients['p50_ms']:.0f} ms, p90 {clients['p90_ms']:.0f} ms, p99 {clients['p99_ms']:.0f} ms; "
          f"{clients['answered']} answered with text ({clients['forward_cache_hits']} from the forward cache), "
          f"{clients['empty']} empty ({clients['superseded']} superseded); "
          f"{clients['leaks']} naming another client's document; {clients['wall_s']:.0f} s in all")


if __name__ == "__main__":
    main()

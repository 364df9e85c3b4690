"""A long typing session against the real server: memory, leaks, latency drift, crashes
and stale completions.

    python -m benchmarks.soak [--keystrokes 10000] [--documents 5] [--interval-ms 30] [--preset smol]

Algorithm:
    start `completer serve --stdio` on a workspace folder holding `documents` standard
        library files (their first 6,000 characters); open them; wait until the models
        are ready
    for each keystroke, `interval-ms` apart (a fast typist):
        type the next character of difflib.py (real code, never repeated, so that every
            completion is generated, not found in the text above) at the cursor of the
            current document (an incremental didChange), then request an inline
            completion at the cursor without waiting for it; an older request still
            open is cancelled ($/cancelRequest) every third time, else left for the
            server to supersede
        after each line typed: delete a line 20 lines above the cursor (an edit above),
            so that the documents keep their size: memory then measures leaks, not text
        every 40th keystroke: wait for the open request, as a pause in typing does
        every 250th: save the current document (didSave: its n-gram index is built
            again) and switch to the next one
    time each answered request from its didChange to its response
    a stale completion: an answer whose version (the accept command's second argument)
        is not the version of the document the request was made against
    at the end: close every document; completer/stats must show no session left and no
        saved KV cache
Report resident memory after a first visit to every document and at the end (with the
KV caches saved for the documents not being completed, which cache.budget_mb bounds, and
the n-gram indexes of the workspace and of the saved files, which drafting.index_mb does),
p50/p95 of the first and the last thousand keystrokes, crashes (the process gone) and
stale completions.
"""

import argparse
import asyncio
import itertools
import json
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

# Keystrokes before memory is first read: every document visited once (a switch every 250).
WARM_UP = 1250
FILES = ["textwrap.py", "shlex.py", "string.py", "fnmatch.py", "glob.py", "calendar.py", "csv.py"]
TYPED_FROM = "difflib.py"  # not among FILES


class Client:
    """JSON-RPC over the server's stdio, requests answered by id as they arrive."""

    def __init__(self, process: asyncio.subprocess.Process):
        self.process = process
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future] = {}
        # Request id -> when its response was read. Taken here, not in a done-callback:
        # asyncio runs callbacks on a later turn of the loop, after a waiter may already
        # have seen the future done.
        self.arrivals: dict[int, float] = {}
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while (line := await stream.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if not line or length is None:
                return
            message = json.loads(await stream.readexactly(length))
            future = self.pending.pop(message.get("id"), None) if "method" not in message else None
            if future is not None and not future.done():
                self.arrivals[message["id"]] = time.perf_counter()
                future.set_result(message)

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def request(self, method: str, params) -> tuple[int, asyncio.Future]:
        id_ = next(self.ids)
        self.pending[id_] = asyncio.get_running_loop().create_future()
        self.send({"id": id_, "method": method, "params": params})
        return id_, self.pending[id_]

    async def call(self, method: str, params=None, timeout: float = 120) -> dict:
        _, future = self.request(method, params)
        return await asyncio.wait_for(future, timeout)


def resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def percentile(values: list[float], q: float) -> float:
    return float(statistics.quantiles(values, n=100)[q - 1]) if len(values) >= 2 else (values or [0.0])[0]


class Document:
    def __init__(self, uri: str, text: str):
        self.uri, self.text, self.version = uri, text, 1
        self.cursor = text.index("\n", len(text) // 2) + 1  # a line start in the middle

    def position(self, offset: int) -> dict:
        line = self.text.count("\n", 0, offset)
        return {"line": line, "character": len((self.text[self.text.rfind("\n", 0, offset) + 1 : offset])
                                               .encode("utf-16-le")) // 2}

    def change(self, start: int, end: int, text: str) -> dict:
        """The didChange for replacing start..end with text, applied here too."""
        self.version += 1
        change = {"range": {"start": self.position(start), "end": self.position(end)}, "text": text}
        self.text = self.text[:start] + text + self.text[end:]
        return {"method": "textDocument/didChange",
                "params": {"textDocument": {"uri": self.uri, "version": self.version}, "contentChanges": [change]}}


class Tally:
    """What the session's answers came to: each one's latency by keystroke, and the
    requests answered, cancelled and answered stale."""

    def __init__(self, client: Client):
        self.client = client
        self.latencies: list[tuple[int, float]] = []  # (keystroke, ms)
        self.stale = self.answered = self.cancelled = 0

    async def settle(self, request: tuple[int, asyncio.Future, int, float, int], wait: bool) -> None:
        """Count a request's answer (id, future, version, sent, keystroke), waiting for it
        when `wait`, else only if it is there."""
        id_, future, version, sent, keystroke = request
        if wait:
            await asyncio.wait_for(asyncio.shield(future), 120)
        if not future.done():
            return
        message = future.result()
        arrived = self.client.arrivals.pop(id_)
        if "error" in message:
            return  # cancelled: -32800
        self.answered += 1
        self.latencies.append((keystroke, (arrived - sent) * 1000))
        for item in (message.get("result") or {}).get("items", []):
            self.stale += item["command"]["arguments"][1] != version


async def start(args: argparse.Namespace, workspace: Path) -> tuple[asyncio.subprocess.Process, Client,
                                                                     list[Document]]:
    """The server on a workspace folder of the documents' copies made in `workspace`
    (saved files are indexed only inside one), its models ready and the documents open."""
    server = [str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "completer"), "serve", "--stdio"]
    process = await asyncio.create_subprocess_exec(*server, stdin=asyncio.subprocess.PIPE,
                                                   stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.DEVNULL, limit=2**24)
    client = Client(process)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in FILES[: args.documents]:
        (workspace / name).write_text((stdlib / name).read_text()[:6000])
    await client.call("initialize", {"processId": None, "rootUri": workspace.as_uri(), "capabilities": {},
                                     "initializationOptions": {"models": {"preset": args.preset},
                                                               "generation": {"max_tokens": 16}}})
    client.send({"method": "initialized", "params": {}})
    while not (await client.call("completer/stats"))["result"]["ready"]:
        await asyncio.sleep(0.2)
    documents = []
    for name in FILES[: args.documents]:
        document = Document((workspace / name).as_uri(), (workspace / name).read_text())
        client.send({"method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": document.uri, "languageId": "python", "version": 1, "text": document.text}}})
        documents.append(document)
    return process, client, documents


def delete_a_line_above(client: Client, document: Document) -> None:
    """After a line typed, the line 20 lines above the cursor goes: the document keeps its size."""
    above = document.cursor - 1
    for _ in range(21):
        above = document.text.rfind("\n", 0, max(above, 0))
    line_start = above + 1
    line_end = document.text.index("\n", line_start) + 1
    if line_end < document.cursor:
        client.send(document.change(line_start, line_end, ""))
        document.cursor -= line_end - line_start


async def type_keystrokes(args: argparse.Namespace, process: asyncio.subprocess.Process, client: Client,
                          documents: list[Document], tally: Tally) -> dict:
    """The typing, as the module's docstring says; the figures read after the warm-up."""
    typed = (Path(sysconfig.get_paths()["stdlib"]) / TYPED_FROM).read_text()
    open_request: tuple[int, asyncio.Future, int, float, int] | None = None  # id, future, version, sent, keystroke
    warm = {"memory_mb": 0.0, "saved_kv_mb": 0.0, "index_mb": 0.0}
    current, started = 0, time.monotonic()
    for keystroke in range(args.keystrokes):
        if process.returncode is not None:
            break
        if keystroke and keystroke % 250 == 0:
            client.send({"method": "textDocument/didSave", "params": {"textDocument": {
                "uri": documents[current].uri}}})
            current = (current + 1) % len(documents)
        document = documents[current]
        if document.text[document.cursor - 1] == "\n":
            delete_a_line_above(client, document)
        sent = time.perf_counter()
        client.send(document.change(document.cursor, document.cursor, typed[keystroke % len(typed)]))
        document.cursor += 1
        if open_request is not None:
            if open_request[1].done():
                await tally.settle(open_request, wait=False)
            elif keystroke % 3 == 0:
                client.send({"method": "$/cancelRequest", "params": {"id": open_request[0]}})
                tally.cancelled += 1
        id_, future = client.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": document.uri}, "position": document.position(document.cursor),
            "context": {"triggerKind": 2}})
        open_request = (id_, future, document.version, sent, keystroke)
        if keystroke % 40 == 39:
            await tally.settle(open_request, wait=True)
            open_request = None
        await process.stdin.drain()
        await asyncio.sleep(args.interval_ms / 1000)
        if keystroke == WARM_UP - 1:
            stats = (await client.call("completer/stats"))["result"]
            warm = {"memory_mb": resident_mb(process.pid), "saved_kv_mb": stats["saved_kv_mb"],
                    "index_mb": stats["index_mb"]}
        if keystroke % 1000 == 999:
            print(f"{keystroke + 1} keystrokes, {time.monotonic() - started:.0f} s, "
                  f"{resident_mb(process.pid):.0f} MB", flush=True)
    if open_request is not None and process.returncode is None:
        await tally.settle(open_request, wait=True)
    return warm


async def close(keystrokes: int, process: asyncio.subprocess.Process, client: Client, documents: list[Document],
                tally: Tally, warm: dict) -> dict:
    """Every document closed and the server shut down; the figures of the end."""
    memory_end = resident_mb(process.pid)
    at_end = (await client.call("completer/stats"))["result"]
    for document in documents:
        client.send({"method": "textDocument/didClose", "params": {"textDocument": {"uri": document.uri}}})
    stats = (await client.call("completer/stats"))["result"]
    first = [ms for k, ms in tally.latencies if k < 1000]
    last = [ms for k, ms in tally.latencies if k >= keystrokes - 1000]
    report = {
        "memory_after_warm_up_mb": warm["memory_mb"], "memory_end_mb": memory_end,
        "memory_growth_mb": memory_end - warm["memory_mb"],
        "saved_kv_mb_after_warm_up": warm["saved_kv_mb"], "saved_kv_mb_end": at_end["saved_kv_mb"],
        # The workspace's and the saved files' n-gram indexes (drafting.index_mb).
        "index_mb_after_warm_up": warm["index_mb"], "index_mb_end": at_end["index_mb"],
        "sessions_after_closing": stats["sessions"], "saved_kv_mb_after_closing": stats["saved_kv_mb"],
        "first_1000_p50_ms": percentile(first, 50), "first_1000_p95_ms": percentile(first, 95),
        "last_1000_p50_ms": percentile(last, 50), "last_1000_p95_ms": percentile(last, 95),
        "requests": stats["requests"], "forward_cache_hits": stats["forward_cache_hits"],
        "superseded": stats["superseded"],
    }
    client.send({"id": 0, "method": "shutdown"})
    client.send({"method": "exit"})
    return report


async def run(args: argparse.Namespace, workspace: Path) -> dict:
    """The session, on `workspace`: start, type, close; its report."""
    process, client, documents = await start(args, workspace)
    tally = Tally(client)
    started = time.monotonic()
    warm = await type_keystrokes(args, process, client, documents, tally)
    crashed = process.returncode is not None
    report: dict = {"keystrokes": args.keystrokes, "documents": args.documents, "crashes": int(crashed),
                    "answered": tally.answered, "cancelled": tally.cancelled, "stale_completions": tally.stale}
    if not crashed:
        report.update(await close(args.keystrokes, process, client, documents, tally, warm))
        report["seconds"] = time.monotonic() - started
    await asyncio.wait_for(process.wait(), 30)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keystrokes", type=int, default=10_000)
    parser.add_argument("--documents", type=int, default=5, choices=range(1, len(FILES) + 1))
    parser.add_argument("--interval-ms", type=float, default=30.0)
    parser.add_argument("--preset", default="smol")
    with tempfile.TemporaryDirectory(prefix="completer-soak-") as workspace:
        report = asyncio.run(run(parser.parse_args(), Path(workspace)))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

"""A team server that misbehaves: the real llama-server (`completer build`, the smol
target) behind a proxy on 127.0.0.1 that, on demand, answers 400 or 500, answers slowly,
sends a 100 MB body, sends a line that never ends, stalls /tokenize, or parses control
text in /tokenize; and a scripted server whose stream never ends (events of tokens,
events of none, lines that are no events). The client cuts each at its cap or deadline
or at the request's cancel flag, and the real `completer serve --stdio --backend
llama-server --server-url PROXY`, driven by pytest-lsp, answers every request within a
bound, says "down" only for a server that is, holds its memory, and answers again once
the server behaves."""

import asyncio
import http.client
import json
import re
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from completer.decoders.clients import (MAX_BODY_BYTES, MAX_LINE_BYTES, CancelFlag, LlamaServerClient, OpenAIClient,
                                        RemoteGeneration)
from completer.decoders.server import LlamaServerAPI
from completer.errors import Cancelled, ServerError
from completer.requests import StopReason
from lsp_session import inline, open_document, start, stats, wait_ready

HUGE_BYTES = 100 << 20  # the body and the line a hostile server sends
SLOW_S = 120  # how long a slow answer keeps the client waiting: past any deadline here
# The language server's deadline per call here (a completion takes a fraction of a second,
# but other tests may share the 2 cores), and the bound on an answer: the deadline, the
# debounce and the work around them.
TIMEOUT_S = 10.0
BOUND_S = TIMEOUT_S + 6


class MisbehavingProxy:
    """A proxy to the real llama-server at `upstream`; `mode` says how it misbehaves:

        pass            forwards everything
        400, 500        answers /completion with that status and llama-server's error body
        slow            answers /completion after SLOW_S
        huge            answers /tokenize with a JSON body of HUGE_BYTES, /completion with
                        one event line of HUGE_BYTES
        endless         answers /completion with a line a byte every 50 ms, never ended
        stall-tokenize  answers /tokenize after SLOW_S
        parse-special   forwards /tokenize with parse_special true whatever was asked
    """

    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        self.mode = "pass"
        self.requests: list[str] = []  # the paths asked, in order
        self.stopping = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                proxy.answer(self)

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"

    def start(self) -> "MisbehavingProxy":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        path, mode = handler.path, self.mode
        self.requests.append(path)
        try:
            if path == "/completion" and mode in ("400", "500"):
                error = {"code": int(mode), "message": f"the proxy answers {mode}", "type": "invalid_request_error"
                         if mode == "400" else "server_error"}
                self.send(handler, int(mode), json.dumps({"error": error}).encode())
            elif (path == "/completion" and mode == "slow") or (path == "/tokenize" and mode == "stall-tokenize"):
                self.stopping.wait(SLOW_S)
            elif path == "/tokenize" and mode == "huge":
                self.send_huge(handler, b'{"tokens": [', b"1, 1, 1, 1, ", b'1]}', "application/json")
            elif path == "/completion" and mode == "huge":
                self.send_huge(handler, b'data: {"content": "', b"x" * 16, b'"}\n\n', "text/event-stream")
            elif path == "/completion" and mode == "endless":
                self.send_endless(handler)
            else:
                if path == "/tokenize" and mode == "parse-special":
                    body = json.dumps({**json.loads(body), "parse_special": True}).encode()
                self.forward(handler, path, body)
        except OSError:  # the client hung up: what a cut is
            pass

    def send(self, handler, status: int, data: bytes, kind: str = "application/json") -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def send_huge(self, handler, head: bytes, piece: bytes, tail: bytes, kind: str) -> None:
        """head, `piece` over and over for HUGE_BYTES, tail: made as it is sent, so that
        the memory measured in this process is the client's."""
        block = piece * ((1 << 20) // len(piece))
        blocks = HUGE_BYTES // len(block)
        handler.send_response(200)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(head) + blocks * len(block) + len(tail)))
        handler.end_headers()
        handler.wfile.write(head)
        for _ in range(blocks):
            handler.wfile.write(block)
        handler.wfile.write(tail)

    def send_endless(self, handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        handler.wfile.write(b'data: {"content": "')
        while not self.stopping.wait(0.05):
            handler.wfile.write(b"x")
            handler.wfile.flush()

    def forward(self, handler, path: str, body: bytes) -> None:
        upstream = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
        try:
            upstream.request(handler.command, path, body or None, {"Content-Type": "application/json"})
            response = upstream.getresponse()
            kind = response.getheader("Content-Type", "application/json")
            if "event-stream" not in kind:
                self.send(handler, response.status, response.read(), kind)
                return
            handler.send_response(response.status)  # a stream: forwarded line by line, ended by closing
            handler.send_header("Content-Type", kind)
            handler.end_headers()
            while line := response.readline():
                handler.wfile.write(line)
                handler.wfile.flush()
        finally:
            upstream.close()


@pytest.fixture
def proxy(smol_llama_server):
    proxy = MisbehavingProxy(smol_llama_server.url).start()
    yield proxy
    proxy.stop()


# The client alone: each misbehaviour is one clear error, at its cap or deadline.

def test_a_body_past_the_cap_is_cut_there_and_never_held_whole(proxy):
    proxy.mode = "huge"
    tracemalloc.start()
    try:
        with pytest.raises(ServerError, match=f"sent more than {MAX_BODY_BYTES >> 20} MiB"):
            LlamaServerClient(proxy.url).tokenize("x = 1")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_BODY_BYTES, f"{peak >> 20} MiB held for a body cut at {MAX_BODY_BYTES >> 20} MiB"


def test_a_stream_line_past_the_cap_is_cut_there(proxy):
    proxy.mode = "huge"
    tracemalloc.start()
    try:
        with pytest.raises(ServerError, match=f"a line of more than {MAX_LINE_BYTES >> 20} MiB"):
            LlamaServerClient(proxy.url).complete([1, 2, 3], 4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_LINE_BYTES, f"{peak >> 20} MiB held for a line cut at {MAX_LINE_BYTES >> 20} MiB"


def test_a_line_that_never_ends_is_cut_at_the_requests_deadline(proxy):
    proxy.mode = "endless"  # a byte every 50 ms: no socket timeout ever fires
    client = LlamaServerClient(proxy.url, total_timeout_s=1.0)
    errors = []

    def request():
        try:
            client.complete([1, 2, 3], 4)
        except ServerError as error:
            errors.append(error)

    reading = threading.Thread(target=request, daemon=True)  # the proxy's stop ends it, if this fails
    reading.start()
    reading.join(3.0)
    assert not reading.is_alive(), "still reading a line that never ends, past the 1 s deadline"
    assert re.search(r"/completion broke off: timed out \(models.server_timeout_s is 1\)", str(errors[0]))


def test_a_stalled_tokenize_returns_the_moment_its_request_is_cancelled(proxy):
    proxy.mode = "stall-tokenize"
    cancel = CancelFlag()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        LlamaServerClient(proxy.url).tokenize("def f(", False, cancel)
    assert time.monotonic() - started < 1.0


class EndlessStream:
    """A server whose stream never ends: `event` over and over (a line `line` when given,
    not an event) until the client hangs up, in llama-server's or OpenAI's format alike."""

    def __init__(self, event: dict | None, line: bytes = b""):
        self.line = line or f"data: {json.dumps(event)}\n\n".encode()
        self.stopping = threading.Event()
        endless = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    while not endless.stopping.is_set():
                        self.wfile.write(endless.line * 16)
                except OSError:  # the client hung up: where the stream ends
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


ASKED = 16  # max_tokens of the requests made of an endless stream
LLAMA_EVENT = {"content": "x", "tokens": [7], "stop": False}
OPENAI_EVENT = {"choices": [{"index": 0, "text": "x", "finish_reason": None}]}


def ask(kind: str, url: str):
    """A completion of ASKED tokens from `url` through the client of `kind`, within a 5 s
    deadline: what it returned, or the ServerError it raised."""
    try:
        if kind == "llama-server":
            return LlamaServerClient(url, total_timeout_s=5).complete([1, 2, 3], ASKED)
        return OpenAIClient(url, total_timeout_s=5).complete("scripted", "def f(", ASKED)
    except ServerError as error:
        return error


@pytest.mark.parametrize("kind, event, text, tokens", [
    ("llama-server", LLAMA_EVENT, "x" * ASKED, [7] * ASKED),
    ("llama-server", {"content": "xy", "tokens": [7, 8], "stop": False}, "xy" * (ASKED // 2), [7, 8] * (ASKED // 2)),
    ("llama-server", {"content": "", "stop": False}, "", []),  # events of no token: cut by their number
    ("openai", OPENAI_EVENT, "x" * ASKED, []),
    ("openai", {"choices": []}, "", []),
])
def test_an_endless_stream_is_read_for_the_tokens_asked_and_its_closing_events_alone(kind, event, text, tokens):
    server = EndlessStream(event)
    tracemalloc.start()
    try:
        generation = ask(kind, server.url)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        server.stop()
    assert isinstance(generation, RemoteGeneration), f"{generation} ({peak >> 20} MiB held)"
    assert (generation.text, generation.tokens, generation.stop_reason) == (text, tokens, StopReason.MAX_TOKENS)
    assert peak < 1 << 20, f"{peak >> 20} MiB held for {ASKED} tokens"


def test_an_endless_stream_of_lines_that_are_no_events_is_cut_at_its_bytes():
    server = EndlessStream(None, b": keep-alive\n")
    try:
        error = ask("llama-server", server.url)
    finally:
        server.stop()
    assert isinstance(error, ServerError) and "MiB for 16 tokens: not a stream this client asks for" in str(error), \
        error


def test_a_refused_request_is_the_requests_fault_and_a_failing_server_is_down(proxy, smol_llama_server):
    client = LlamaServerClient(proxy.url)
    proxy.mode = "400"
    with pytest.raises(ServerError, match="answered HTTP 400: the proxy answers 400") as refused:
        client.complete([1, 2, 3], 4)
    assert refused.value.request_fault and not refused.value.context_exceeded
    proxy.mode = "500"
    with pytest.raises(ServerError, match="answered HTTP 500") as failed:
        client.complete([1, 2, 3], 4)
    assert not failed.value.request_fault
    real = LlamaServerClient(smol_llama_server.url)  # llama-server's own refusal of a prompt past its context
    with pytest.raises(ServerError, match="exceeds the available context size") as exceeded:
        real.complete([1] * (real.props().context_tokens + 10), 4)
    assert exceeded.value.request_fault and exceeded.value.context_exceeded


def test_a_server_that_parses_control_text_in_tokenize_is_refused_naming_its_build(proxy):
    backend = LlamaServerAPI(LlamaServerClient(proxy.url))
    assert backend.connect().name  # passing parse_special on: accepted
    proxy.mode = "parse-special"
    build = LlamaServerClient(proxy.url).props().build
    assert re.fullmatch(r"b\d+-[0-9a-f]+", build), build
    with pytest.raises(ServerError, match=rf"makes the text '<\|im_end\|>' into its control token \d+ although asked "
                                          rf"not to \(parse_special false; its build {build}\)"):
        backend.connect()


# The language server over stdio: every request answered within BOUND_S, whatever the server does.

async def serve_on(url: str, cache: Path) -> tuple[LanguageClient, int]:
    """`completer serve --stdio` on the team server at `url`, initialized; its process id."""
    options = {"models": {"server_timeout_s": TIMEOUT_S}, "prompt": {"heal": False},
               "generation": {"max_tokens": 8, "time_budget_ms": 0}}
    client = await start(cache, options, flags=("--backend", "llama-server", "--server-url", url))
    await wait_ready(client)
    return client, client._server.pid  # pygls's own subprocess


def peak_memory_mb(pid: int) -> float:
    """A process's peak resident memory (VmHWM), MB."""
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


class Typist:
    """Requests, each in a document of its own: no forward cache, and a prefix the server
    has not tokenized yet."""

    def __init__(self, client: LanguageClient):
        self.client, self.count = client, 0

    async def request(self) -> types.InlineCompletionList | None:
        self.count += 1
        uri = f"file:///project/file_{self.count}.py"
        open_document(self.client, uri, f"# file {self.count}\ndef mean(values):\n    return sum(values) / ")
        return await asyncio.wait_for(inline(self.client, uri, 2, 25), BOUND_S)

    async def answered(self, tries: int = 40) -> types.InlineCompletionList:
        """The first real answer, past the backoff of a server that was down."""
        for _ in range(tries):
            if (answer := await self.request()) is not None:
                return answer
            await asyncio.sleep(0.5)
        pytest.fail("no completion after the server behaved again")


def down_messages(client: LanguageClient, url: str) -> list[str]:
    return [m.message for m in client.messages if url in m.message]


async def test_a_misbehaving_team_server_never_stops_the_language_server_answering(proxy, smol_cache):
    client, pid = await serve_on(proxy.url, smol_cache)
    typist = Typist(client)
    assert await typist.answered(1)
    baseline_mb = peak_memory_mb(pid)

    proxy.mode = "400"  # one request's fault: no "down", and the next request is served at once
    assert await typist.request() is None
    proxy.mode = "pass"
    assert await typist.request() is not None
    assert not down_messages(client, proxy.url) and not (await stats(client))["server_error"]

    seen = 0
    for mode, reason in [("500", "answered HTTP 500"), ("slow", "timed out"), ("endless", "timed out"),
                         ("huge", f"more than {MAX_BODY_BYTES >> 20} MiB")]:
        proxy.mode = mode
        started = time.monotonic()
        assert await typist.request() is None
        assert time.monotonic() - started < BOUND_S
        messages = down_messages(client, proxy.url)
        assert len(messages) == seen + 1 and reason in messages[-1], (mode, messages)
        seen += 1
        proxy.mode = "pass"
        assert await typist.answered()
        assert not (await stats(client))["server_error"]
    assert sum("answers again" in m.message for m in client.log_messages) == seen
    grown = peak_memory_mb(pid) - baseline_mb
    assert grown < 3 * (MAX_BODY_BYTES >> 20), f"the server's peak memory grew {grown:.0f} MB"
    await client.shutdown_session()


async def test_a_stalled_tokenize_is_let_go_when_a_newer_request_comes(proxy, smol_cache):
    client, _ = await serve_on(proxy.url, smol_cache)
    uri = "file:///project/a.py"
    open_document(client, uri, "def mean(values):\n    return ")
    proxy.mode = "stall-tokenize"
    started = time.monotonic()
    older = asyncio.create_task(inline(client, uri, 1, 11))
    await asyncio.sleep(1.0)  # the older request waits on /tokenize
    newer = asyncio.create_task(inline(client, uri, 1, 11))
    assert await asyncio.wait_for(older, BOUND_S) is None
    assert time.monotonic() - started < TIMEOUT_S  # let go at the newer request, not at the deadline
    proxy.mode = "pass"
    await asyncio.wait_for(newer, BOUND_S)
    assert (await stats(client))["superseded"] >= 1
    await client.shutdown_session()

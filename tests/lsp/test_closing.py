"""Closing a document while work for it is in flight, on the real smol pair: nothing of
the closed document stays (session, KV caches live or saved, n-gram entry, tuner
curves), whatever ran or waited at the close; and a close never takes what a reopened
document's requests keep."""

import asyncio
import itertools
import threading
import time

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from completer.config import Config, GenerationOptions
from completer.decoders.local import LocalDecoder
from completer.editor.completer import Completer
from completer.engine.generation import Engine
from completer.lsp import protocol
from completer.requests import CompletionRequest, Source
from lsp_session import open_document, ready, stats, warm

STATS_PY = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    "
AT_END = (5, 4)
# b.py: what follows its end is plain, so a completion is shown there and a prefetch follows it.
SQUARES_PY = "numbers = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nsquares = [n * n for n in numbers]\nfor square in squares:\n    "
SQUARES_END = (3, 4)


def at_end(document: str, text: str) -> CompletionRequest:
    """A request at the end of `text`, made in a new opening of the document."""
    return CompletionRequest(document, document, text, len(text), "python")


@pytest.mark.slow  # seconds of real model passes
def test_a_close_while_the_engine_is_busy_leaves_the_reopened_documents_caches(target, draft):
    """A close comes while another request holds the engine, the document is opened again
    and completed: the close, done before the reopen on the server's event loop, must not
    wait for the engine, and its release of the caches must come before the reopened
    document's completion. Released after it, it took that completion's KV caches and
    tuner curve, and the next keystroke evaluated the whole prompt again."""
    config = Config(generation=GenerationOptions(max_tokens=16, time_budget_ms=0))
    completer = Completer(LocalDecoder(Engine(target, draft, n_ctx=2048, calibrate_s=0)), config)
    document = "file:///project/reopened.py"
    completer.complete(at_end(document, STATS_PY))
    holding, free = threading.Event(), threading.Event()

    def hold_the_engine() -> None:
        with completer.decoder.turn():
            holding.set()
            free.wait()

    holder = threading.Thread(target=hold_the_engine)
    holder.start()
    holding.wait()
    closing = threading.Thread(target=completer.close, args=(document,))
    closing.start()
    closing.join(timeout=30)
    try:
        assert not closing.is_alive(), "close() waited for the engine: the server runs it on its event loop"
        reopened = threading.Thread(target=completer.complete, args=(at_end(document, STATS_PY),))
        reopened.start()
    finally:
        free.set()
        holder.join()
        closing.join()
    reopened.join()
    typed = completer.complete(at_end(document, STATS_PY + "total = 0\n    "))
    assert typed.source == Source.MODEL
    assert typed.evaluated_tokens < typed.prompt_tokens // 2, (typed.evaluated_tokens, typed.prompt_tokens)
    current = completer.stats()
    assert (current.sessions, current.tuned_documents) == (1, 1), current


def test_work_asked_in_a_document_already_closed_does_nothing(target, draft):
    """A next edit that waited for the completions before it, a prefetch or a warm that
    starts once its document is closed: each stops before it enters the document, and
    nothing of it is kept (a session made then would stay for good: its close is past)."""
    completer = Completer(LocalDecoder(Engine(target, draft, n_ctx=2048, calibrate_s=0)))
    document = "file:///project/closed.py"
    request = at_end(document, STATS_PY)
    request.closed.set()  # the editor closed it after asking, before the work started
    assert completer.complete(request).source == Source.SUPERSEDED
    assert completer.next_edit(request).source == Source.SUPERSEDED
    assert completer.warm(request) == 0
    assert completer.prefetch(request, len(STATS_PY) - 4) is None
    current = completer.stats()
    assert (current.sessions, current.tuned_documents, current.requests, current.prefetches) == (0, 0, 1, 0), current
    assert completer.decoder.engine.target.evaluated == 0


# What can be under way for a document when it closes. `prefetch`: a completion was shown
# and what follows its acceptance is being computed; `candidates`: completions decode
# several candidates (generation.candidates).
WORK = ("inline", "next edit", "warm", "prefetch", "candidates")
COMBINATIONS = [combination for size in range(len(WORK) + 1) for combination in itertools.combinations(WORK, size)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_client(smol, smol_cache, tmp_path_factory):
    """One server for every combination: each leaves it with no document open."""
    root = tmp_path_factory.mktemp("project")  # documents in the workspace: n-gram lookup drafts from them
    # No context chunks: each combination's prompts are the same, whatever documents came before.
    options = {"edits": {"lines_above": 2, "lines_below": 2, "context_lines": 1}, "prompt": {"chunks": 0}}
    lsp_client = await ready(smol_cache, options, root=root)
    lsp_client.root = root
    yield lsp_client
    await lsp_client.shutdown_session()


def send_inline(client, uri: str, line: int, character: int) -> asyncio.Future:
    """An inline completion request, sent now: the client's async methods send once awaited."""
    return send(client, types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionParams(
        context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic),
        text_document=types.TextDocumentIdentifier(uri), position=types.Position(line, character)))


def send_inline_edit(client, uri: str, line: int, character: int) -> asyncio.Future:
    return send(client, protocol.INLINE_EDIT, {
        "textDocument": {"uri": uri, "version": 1}, "position": {"line": line, "character": character}})


def send(client, method: str, params) -> asyncio.Future:
    return asyncio.wrap_future(client.protocol.send_request(method, params))


def close(client, uri: str) -> None:
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))


def left_behind(current: dict) -> tuple:
    return current["sessions"], current["saved_kv_mb"], current["drafting_documents"], current["tuned_documents"]


NOTHING = (0, 0, 0, 0)  # sessions, saved KV (MB), documents n-gram lookup drafts from, documents with curves


@pytest.mark.slow  # a completion or two per combination, 32 combinations
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("in_flight", COMBINATIONS, ids=lambda work: "+".join(work).replace(" ", "_") or "nothing")
async def test_a_document_closed_with_any_work_in_flight_leaves_nothing_behind(shared_client, in_flight):
    """As a new user would: a.py opened and completed, b.py opened, the work sent for b.py
    and b.py closed at once, every answer waited for, then a.py closed: no session, saved
    KV, n-gram entry or tuner curve is left, and none comes back while the server idles.
    A next edit waits for the completions before it and so started after the close: it
    made b.py a session again that no close would ever remove."""
    client = shared_client
    name = "+".join(in_flight).replace(" ", "_") or "nothing"
    a, b = ((client.root / f"{side}-{name}.py").as_uri() for side in "ab")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        {"generation": {"candidates": 3 if "candidates" in in_flight else 1}}))
    open_document(client, a, STATS_PY)
    await send_inline(client, a, *AT_END)
    open_document(client, b, SQUARES_PY)
    if "prefetch" in in_flight:
        assert (await send_inline(client, b, *SQUARES_END)).items  # its follow-up is computed from now on
    answers = []
    if "inline" in in_flight:  # elsewhere than the one shown: decoded, not the forward cache's
        answers.append(send_inline(client, b, 1, len("squares = [n * n for n in numbers]")))
    if "next edit" in in_flight:
        answers.append(send_inline_edit(client, b, *SQUARES_END))
    if "warm" in in_flight:
        warm(client, b, *SQUARES_END)
    # Answered once the server has read all that came before it, which it then starts
    # before it reads the close: sent with the rest, the close could be read in one go
    # with them, and close before their work began.
    await stats(client)
    close(client, b)
    for answer in answers:
        try:
            await answer
        except JsonRpcException:  # cancelled by the close: an answer too
            pass
    close(client, a)
    deadline = time.monotonic() + 30
    while left_behind(await stats(client)) != NOTHING and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    settled = time.monotonic() + 1  # work that would start late (a prefetch, a warm) has its chance
    while time.monotonic() < settled:
        assert left_behind(await stats(client)) == NOTHING
        await asyncio.sleep(0.05)

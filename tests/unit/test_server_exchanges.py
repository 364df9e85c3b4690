"""One exchange per document in flight on a server (issue 57's client under load): a
request waits for its document's exchange under way, while other documents' go at once."""

import threading
import time

import pytest

from completer.config import Config, GenerationOptions
from completer.decoders.clients import OpenAIClient
from completer.decoders.server import OpenAIAPI, ServerDecoder
from completer.editor.completer import Completer
from completer.requests import CompletionRequest, Source
from scripted_server import ScriptedServer

TEXT = "def mean(values):\n    "
WAIT_S = 10


@pytest.fixture
def scripted():
    server = ScriptedServer()
    server.answer, server.pace_s = "return sum(values) / len(values)", 0.05  # 11 events, over half a second
    yield server
    server.stop()


def request(document: str) -> CompletionRequest:
    return CompletionRequest(document, document, TEXT, len(TEXT), "python")


def streaming_while_editing(scripted: ScriptedServer, edited: str, completed: str) -> int:
    """The most answers streamed at once when `completed` asks for a completion while a
    next edit of `edited` streams its answer (an inline request does not cancel it)."""
    completer = Completer(ServerDecoder(OpenAIAPI(OpenAIClient(scripted.url))),
                          Config(generation=GenerationOptions(time_budget_ms=0)))
    editing = threading.Thread(target=completer.next_edit, args=(request(edited),), daemon=True)
    editing.start()
    deadline = time.monotonic() + WAIT_S
    while not scripted.streaming and time.monotonic() < deadline:
        time.sleep(0.005)
    assert scripted.streaming == 1, "the next edit's answer never started"
    completion = completer.complete(request(completed))
    editing.join(WAIT_S)
    assert completion.source == Source.MODEL and completion.text.startswith("return sum(values)")
    return scripted.most_streaming


def test_a_request_waits_for_its_documents_exchange_under_way(scripted):
    assert streaming_while_editing(scripted, "a.py", "a.py") == 1


def test_another_documents_request_goes_at_once(scripted):
    assert streaming_while_editing(scripted, "a.py", "b.py") == 2

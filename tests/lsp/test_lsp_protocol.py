"""Messages no well-behaved client sends: each gets the proper LSP error, and the server
goes on serving. Raw bytes to the real server process."""

import inspect
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from completer.lsp.protocol import STATS_KEYS
from completer.lsp.server import CompleterProtocol, CompleterServer
from raw_lsp import RawServer

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

INITIALIZE = {"processId": None, "rootUri": None, "capabilities": {},
              "initializationOptions": {"models": {"preset": "smol"}}}


@pytest.fixture
def server(smol_cache):
    """A server no message was sent to yet: each test initializes it, or not, its own way."""
    raw = RawServer({"COMPLETER_CACHE_DIR": str(smol_cache)})
    yield raw
    raw.close()


def error_code(response: dict) -> int:
    assert "error" in response, response
    return response["error"]["code"]


def test_a_request_before_initialize_is_refused_and_initialize_still_works(server):
    params = {"textDocument": {"uri": "file:///a.py"}, "position": {"line": 0, "character": 0},
              "context": {"triggerKind": 1}}
    assert error_code(server.request(1, "textDocument/inlineCompletion", params)) == -32002
    server.send({"method": "textDocument/didOpen", "params": {}})  # a notification: dropped
    assert "capabilities" in server.request(2, "initialize", INITIALIZE)["result"]


def test_bad_bodies_get_a_parse_error_and_the_server_goes_on(server):
    server.request(1, "initialize", INITIALIZE)
    server.send_bytes(b"{this is not json")
    assert error_code(server.response(None)) == -32700
    server.send_bytes(b'{"jsonrpc": "2.0", "id": 5, "method": "\xff\xfe"}')  # not UTF-8
    assert error_code(server.response(None)) == -32700
    answer = server.request(2, "completer/stats")
    assert answer["id"] == 2 and set(answer["result"]) == set(STATS_KEYS)


def test_params_of_the_wrong_type_and_unknown_methods_are_answered(server):
    server.request(1, "initialize", INITIALIZE)
    wrong = server.request(2, "textDocument/inlineCompletion",
                           {"textDocument": {"uri": 12}, "position": "here", "context": {"triggerKind": 1}})
    assert error_code(wrong) == -32602 and "position" in wrong["error"]["message"]
    assert error_code(server.request(3, "textDocument/unheardOf", {})) == -32601
    assert "result" in server.request(4, "completer/stats")


def test_a_wrong_content_length_loses_only_that_message(server):
    server.request(1, "initialize", INITIALIZE)
    body = b'{"jsonrpc": "2.0", "id": 2, "method": "completer/stats"}'
    server.send_bytes(body, length=len(body) - 5)  # too short: the rest is garbage before the next header
    assert error_code(server.response(None)) == -32700
    assert "result" in server.request(3, "completer/stats")


def test_requests_after_shutdown_are_invalid_and_exit_ends_the_process(server):
    server.request(1, "initialize", INITIALIZE)
    assert server.request(2, "shutdown")["result"] is None
    assert error_code(server.request(3, "completer/stats")) == -32600
    server.send({"method": "exit"})
    assert server.process.wait(20) == 0


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_pinned_pygls_has_what_the_protocol_overrides_and_calls():
    """CompleterProtocol overrides pygls's methods and calls its private `_send_response`
    (the tests above show what that adds): this pygls is the one pyproject.toml pins, and
    has each with the parameters the server gives it."""
    assert f"pygls=={version('pygls')}" in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    assert parameters(LanguageServerProtocol._send_response) == ["self", "msg_id", "result", "error"]
    assert parameters(LanguageServer.report_server_error) == parameters(CompleterServer.report_server_error)
    overrides = {name: value for name, value in vars(CompleterProtocol).items()
                 if callable(value) and hasattr(LanguageServerProtocol, name)}
    assert {"structure_message", "handle_message", "lsp_text_document__did_open"} <= set(overrides)
    for name, override in overrides.items():
        base = getattr(LanguageServerProtocol, name)
        assert parameters(base) == parameters(override), name
        # A document notification replaces pygls's own handler only under pygls's name for it.
        assert getattr(base, "method_name", None) == getattr(override, "method_name", None), name

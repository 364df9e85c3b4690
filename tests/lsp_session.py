"""Driving the real `completer serve --stdio` with pytest-lsp's real client."""

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from completer.lsp import protocol

SERVER = [str(Path(sys.executable).with_name("completer")), "serve", "--stdio"]
FAST = {"generation": {"max_tokens": 16, "time_budget_ms": 0}}
# The next-edit case the LSP and VS Code tests share: a parameter renamed at its definition,
# the uses below it the next edit a model would make.
RENAMED = ("import math\n\n\ndef area(w, height):\n    return width * height\n\n\n"
           "def perimeter(width, height):\n    return 2 * (width + height)\n")
NEXT_EDIT = {"edits": {"lines_above": 3, "lines_below": 3, "context_lines": 2}}


async def start(cache: Path, options: dict[str, Any] | None = None, client: str = "visual-studio-code",
                encodings: list[str] | None = None, root: Path | None = None,
                flags: tuple[str, ...] = ()) -> LanguageClient:
    """A client connected to a fresh server (`flags` on its command line: the machine-level
    options), initialized; the smol pair by default."""
    env = {**os.environ, "COMPLETER_CACHE_DIR": str(cache)}
    lsp_client = await ClientServerConfig(server_command=[*SERVER, *flags], server_env=env).start()
    capabilities = client_capabilities(client)
    if encodings is not None:
        capabilities.general = types.GeneralClientCapabilities(position_encodings=encodings)
    options = {"models": {"preset": "smol"}, **FAST, **(options or {})}
    folders = [types.WorkspaceFolder(root.as_uri(), root.name)] if root else None
    lsp_client.init_result = await lsp_client.initialize_session(types.InitializeParams(
        capabilities=capabilities, initialization_options=options, workspace_folders=folders,
        root_uri=root.as_uri() if root else None))
    return lsp_client


async def ready(cache: Path, options: dict[str, Any] | None = None, **kwargs) -> LanguageClient:
    """start(), once the models are loaded."""
    client = await start(cache, options, **kwargs)
    await wait_ready(client)
    return client


async def stats(client: LanguageClient) -> dict[str, Any]:
    result = await client.protocol.send_request_async(protocol.STATS, None)
    return result._asdict()  # pygls hands an unknown method's result over as a named tuple


async def wait_ready(client: LanguageClient, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not (current := await stats(client))["ready"]:
        assert not current["error"] and time.monotonic() < deadline, f"the models did not load: {current['error']}"
        await asyncio.sleep(0.2)
    return current


def open_document(client: LanguageClient, uri: str, text: str, language: str = "python") -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri, language, 1, text)))


def insert(client: LanguageClient, uri: str, version: int, line: int, character: int, text: str) -> None:
    """Type `text` at a position: an incremental change."""
    position = types.Position(line, character)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(version=version, uri=uri),
        [types.TextDocumentContentChangePartial(types.Range(position, position), text)]))


async def inline(client: LanguageClient, uri: str, line: int, character: int) -> types.InlineCompletionList | None:
    return await client.text_document_inline_completion_async(types.InlineCompletionParams(
        context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic),
        text_document=types.TextDocumentIdentifier(uri), position=types.Position(line, character)))


def warm(client: LanguageClient, uri: str, line: int, character: int) -> None:
    client.protocol.notify(protocol.WARM, {"textDocument": {"uri": uri}, "position": {"line": line,
                                                                                      "character": character}})

"""`completer serve --stdio` driven by a client written for Copilot's language server, as
copilot-lsp's next-edit module for Neovim is, unchanged: Neovim's capabilities (UTF-8
offered first), Copilot's initializationOptions (editorInfo, editorPluginInfo) and
setting (nextEditSuggestions), textDocument/didFocus on every buffer switch, and
textDocument/copilotInlineEdit with positions counted in UTF-16 whatever was negotiated,
of whose answer it shows and applies the first edit only, running no command. The
model's answer is written here to the character (tests/scripted_server.py), so the edit
is known; what is checked is where the client's text ends up, that nothing popped up,
and what the server counted."""

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from completer.lsp import protocol
from lsp_session import SERVER, open_document, stats, wait_ready
from scripted_server import ScriptedServer

pytestmark = pytest.mark.slow  # a server process per test

COPILOT_INIT_OPTIONS = {"editorInfo": {"name": "neovim", "version": "0.11.4"},
                        "editorPluginInfo": {"name": "Github Copilot LSP for Neovim", "version": "0.0.1"}}
COPILOT_SETTINGS = {"nextEditSuggestions": {"enabled": True}}
URI = "file:///project/greet.py"


@pytest.fixture
def scripted():
    server = ScriptedServer()
    yield server
    server.stop()


async def copilot_client(cache: Path, scripted: ScriptedServer, ours: dict[str, Any] | None = None) -> LanguageClient:
    """A started Copilot client (with `ours` in its initializationOptions besides Copilot's),
    the scripted model behind the server; its models may still be loading."""
    env = {**os.environ, "COMPLETER_CACHE_DIR": str(cache)}
    command = [*SERVER, "--decoder", "openai", "--server-url", scripted.url]
    client = await ClientServerConfig(server_command=command, server_env=env).start()
    client.init_result = await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("neovim@v0.11.0"), root_uri="file:///project",
        initialization_options={**COPILOT_INIT_OPTIONS, **(ours or {})}))
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=COPILOT_SETTINGS))
    return client


def focus(client: LanguageClient, uri: str) -> None:
    client.protocol.notify(protocol.DID_FOCUS, {"textDocument": {"uri": uri}})


def utf16_offset(text: str, position: Any) -> int:
    """The offset in `text` of a position whose character counts UTF-16 code units."""
    lines = text.split("\n")
    units = lines[position.line].encode("utf-16-le")[:2 * position.character]
    return sum(len(line) + 1 for line in lines[:position.line]) + len(units.decode("utf-16-le"))


def utf16_position(text: str, offset: int) -> dict[str, int]:
    before = text[:offset].split("\n")
    return {"line": len(before) - 1, "character": len(before[-1].encode("utf-16-le")) // 2}


class Buffer:
    """One open document as the Copilot client holds it."""

    def __init__(self, client: LanguageClient, uri: str, text: str):
        self.client, self.uri, self.text, self.version = client, uri, text, 1
        open_document(client, uri, text)
        focus(client, uri)

    async def next_edit(self, cursor: int) -> list[Any]:
        """The answer's edits at `cursor` (an offset); the first one is shown."""
        result = await self.client.protocol.send_request_async(protocol.INLINE_EDIT, {
            "textDocument": {"uri": self.uri, "version": self.version}, "position": utf16_position(self.text, cursor)})
        if result.edits:
            command = result.edits[0].command._asdict()  # pygls hands unknown results over as named tuples
            self.client.protocol.notify(protocol.DID_SHOW_INLINE_EDIT, {"item": {"command": command}})
        return list(result.edits)

    def change(self, *changes: tuple[int, int, str]) -> None:
        """Replace text[start:end] with text for each (start, end, text), the later first,
        in one didChange, telling the server in UTF-16 positions."""
        events = []
        for start, end, text in sorted(changes, reverse=True):
            events.append(types.TextDocumentContentChangePartial(types.Range(
                types.Position(**utf16_position(self.text, start)), types.Position(**utf16_position(self.text, end))),
                text))
            self.text = self.text[:start] + text + self.text[end:]
        self.version += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=self.version, uri=self.uri), events))

    def apply(self, *edits: Any) -> None:
        """Apply an answer's edits as the client reads them: their ranges in UTF-16."""
        self.change(*((utf16_offset(self.text, edit.range.start), utf16_offset(self.text, edit.range.end), edit.text)
                      for edit in edits))

    async def server_text(self) -> str:
        return (await self.client.protocol.send_request_async(protocol.DOCUMENT, {"uri": self.uri})).text


def pop_ups(client: LanguageClient) -> list[str]:
    return [message.message for message in client.messages if message.type <= types.MessageType.Warning]


async def counted(client: LanguageClient, key: str, value: int, timeout: float = 10) -> dict[str, Any]:
    """The stats once `key` reached `value` (or the last ones, after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while (current := await stats(client))[key] < value and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return current


async def test_a_next_edit_after_non_ascii_text_applies_at_the_right_place(scripted, tmp_path):
    text = 'def greet(name):\n    print("héllo wörld 🌍", nme)\n'
    fixed = text.replace("nme)", "name)")
    scripted.answer = fixed + "</region>"
    client = await copilot_client(tmp_path, scripted)
    try:
        await wait_ready(client)
        buffer = Buffer(client, URI, text)
        edits = await buffer.next_edit(text.index("nme") + 3)
        assert len(edits) == 1
        buffer.apply(edits[0])
        assert buffer.text.split("\n")[1] == fixed.split("\n")[1]
        assert client.init_result.capabilities.position_encoding == "utf-16"  # Neovim offers it second
        assert await buffer.server_text() == fixed
        current = await counted(client, "edits_accepted", 1)
        assert (current["edits_shown"], current["edits_accepted"]) == (1, 1)  # the change accepted it: no command ran
        assert pop_ups(client) == []
    finally:
        await client.shutdown_session()


RENAMED = "def area(width, height):\n    print(w)\n    return w * height\n"
RENAMED_ALL = RENAMED.replace("(w)", "(width)").replace("n w *", "n width *")


async def test_a_rename_on_two_lines_comes_as_one_edit_and_applies_whole(scripted, tmp_path):
    scripted.answer = RENAMED_ALL + "</region>"
    client = await copilot_client(tmp_path, scripted)
    try:
        await wait_ready(client)
        buffer = Buffer(client, URI, RENAMED)
        edits = await buffer.next_edit(len("def area(width"))
        buffer.apply(edits[0])  # the first edit, all this client applies
        assert buffer.text == RENAMED_ALL
        assert len(edits) == 1
        assert await buffer.server_text() == RENAMED_ALL
        assert (await counted(client, "edits_accepted", 1))["edits_accepted"] == 1
        assert pop_ups(client) == []
    finally:
        await client.shutdown_session()


async def test_a_client_that_takes_several_edits_gets_each_and_a_command_counts_them_once(scripted, tmp_path):
    """completer's own plugins say they apply every edit (protocol.CLIENT_OPTIONS), apply
    them and run the edits' command: one acceptance, the change's, not two."""
    scripted.answer = RENAMED_ALL + "</region>"
    ours = {protocol.CLIENT_OPTIONS: {protocol.SEVERAL_EDITS_OPTION: True}}
    client = await copilot_client(tmp_path, scripted, ours)
    try:
        await wait_ready(client)
        buffer = Buffer(client, URI, RENAMED)
        edits = await buffer.next_edit(len("def area(width"))
        assert [(edit.text, edit.range.start.line) for edit in edits] == [("idth", 1), ("idth", 2)]
        buffer.apply(*edits)  # in one change, as Neovim sends an undo step's
        assert buffer.text == RENAMED_ALL
        assert (await counted(client, "edits_accepted", 1))["edits_accepted"] == 1
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            protocol.ACCEPT_EDIT_COMMAND, list(edits[0].command.arguments)))
        assert (await stats(client))["edits_accepted"] == 1
        assert pop_ups(client) == []
    finally:
        await client.shutdown_session()


async def until(condition, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return condition()


async def test_a_fresh_start_pops_nothing_up_and_did_focus_warms_the_document(scripted, tmp_path):
    """didFocus warms the document (the scripted model is sent its prompt): at its end
    before any request, where the last request was after one."""
    scripted.answer = RENAMED_ALL + "</region>"
    client = await copilot_client(tmp_path, scripted)
    try:
        buffer = Buffer(client, URI, RENAMED)  # opened and focused while the models may still load
        assert await until(lambda: scripted.prompts, timeout=60)
        assert scripted.prompts[0].endswith(RENAMED)
        cursor = len("def area(width")
        assert await buffer.next_edit(cursor)
        buffer.change((len(RENAMED), len(RENAMED), "# typed\n"))  # not the edit shown: no acceptance
        asked = len(scripted.prompts)
        focus(client, URI)
        assert await until(lambda: len(scripted.prompts) > asked)
        assert scripted.prompts[-1].endswith(RENAMED[:cursor])
        current = await stats(client)
        assert (current["edits_shown"], current["edits_accepted"]) == (1, 0)
        assert pop_ups(client) == []
    finally:
        await client.shutdown_session()

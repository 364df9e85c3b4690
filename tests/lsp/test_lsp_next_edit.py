"""textDocument/copilotInlineEdit (next-edit suggestions) from the real server process and
the real smol pair, in the shape Copilot's language server answers it: the edits the user
will make next, for the document's version, none when that version is gone."""

import asyncio

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from completer.lsp import protocol
from lsp_session import NEXT_EDIT, RENAMED, inline, insert, open_document, stats



@pytest.fixture
def lsp_options() -> dict:
    return NEXT_EDIT


async def inline_edit(client, uri: str, version: int | None, line: int, character: int) -> dict:
    document = {"uri": uri} if version is None else {"uri": uri, "version": version}
    result = await client.protocol.send_request_async(protocol.INLINE_EDIT, {
        "textDocument": document, "position": {"line": line, "character": character}})
    return {"edits": [edit._asdict() for edit in result.edits]}  # pygls hands unknown results over as named tuples


async def test_the_next_edit_answers_for_the_documents_version_in_copilots_shape(lsp_client):
    assert lsp_client.init_result.capabilities.experimental == {protocol.INLINE_EDIT_CAPABILITY: True}
    uri = "file:///project/shapes.py"
    open_document(lsp_client, uri, RENAMED.replace("area(w,", "area(width,"))
    insert(lsp_client, uri, 2, 3, len("def area("), "w")
    insert(lsp_client, uri, 3, 3, len("def area(w"), ", ")
    text = RENAMED.replace("area(w,", "area(w, width,")
    # Unchecked unless smol writes a whole rewrite that differs here (it does on this text).
    result = await inline_edit(lsp_client, uri, 3, 3, len("def area(w"))
    assert result["edits"]
    for edit in result["edits"]:
        assert edit["textDocument"]._asdict() == {"uri": uri, "version": 3}
        assert edit["command"].command == protocol.ACCEPT_EDIT_COMMAND and edit["command"].arguments[1] == 3
        assert 0 <= edit["range"].start.line <= edit["range"].end.line <= 7  # inside the region around line 3
    ranges = [((e["range"].start.line, e["range"].start.character), (e["range"].end.line, e["range"].end.character))
              for e in result["edits"]]
    assert all(end <= start for (_, end), (start, _) in zip(ranges, ranges[1:]))  # in order, apart
    assert all(end[1] <= len(text.split("\n")[end[0]]) for _, end in ranges)  # inside the text as it is
    current = await stats(lsp_client)
    assert current["edit_requests"] == 1 and current["edits_suggested"] == 1
    lsp_client.protocol.notify(protocol.DID_SHOW_INLINE_EDIT, {"item": {"command": None}})
    await lsp_client.workspace_execute_command_async(types.ExecuteCommandParams(protocol.REJECT_EDIT_COMMAND, [1, 3]))
    current = await stats(lsp_client)
    assert (current["edits_shown"], current["edits_rejected"], current["edits_accepted"]) == (1, 1, 0)


@pytest.mark.slow  # a long prompt held on purpose
async def test_an_edit_for_a_version_that_is_gone_is_not_given(lsp_client):
    uri = "file:///project/stale.py"
    open_document(lsp_client, uri, RENAMED)
    # The client is at a version the server is not.
    assert await inline_edit(lsp_client, uri, 7, 3, len("def area(w")) == {"edits": []}
    assert (await stats(lsp_client))["edit_requests"] == 0  # so nothing was computed
    # A completion with a long prompt holds the models (about 2,500 tokens, seconds of prefill
    # for smol here) while the edit request passes its first version check and waits its turn,
    # so the change lands before the edit is computed, however fast the machine is.
    busy = "file:///project/long.py"
    open_document(lsp_client, busy, "".join(f"value_{n} = compute({n}, 'x' * {n})\n" for n in range(256)))
    holding = asyncio.ensure_future(inline(lsp_client, busy, 256, 0))
    await asyncio.sleep(0.3)
    asking = asyncio.ensure_future(inline_edit(lsp_client, uri, 1, 3, len("def area(w")))
    await asyncio.sleep(0.3)
    insert(lsp_client, uri, 2, 0, 0, "# changed while the edit waited\n")
    assert await asking == {"edits": []}
    await holding
    current = await stats(lsp_client)
    # The model had edits for version 1 (smol on this text): the version check dropped them.
    assert (current["edit_requests"], current["edits_suggested"]) == (1, 1)


async def test_bad_params_are_an_invalid_params_error_and_the_server_keeps_answering(lsp_client):
    for params in ({"textDocument": {"uri": 7}, "position": {"line": 0, "character": 0}},
                   {"textDocument": {"uri": "file:///project/none.py"}, "position": {"line": -1, "character": 0}},
                   {"textDocument": {"uri": "file:///project/none.py"}, "position": {"line": 0, "character": 0}}):
        with pytest.raises(JsonRpcException) as raised:
            await lsp_client.protocol.send_request_async(protocol.INLINE_EDIT, params)
        assert raised.value.code == -32602
    uri = "file:///project/after.py"
    open_document(lsp_client, uri, RENAMED)
    assert "edits" in await inline_edit(lsp_client, uri, None, 3, 9)


@pytest.mark.slow  # a server of its own and the models loaded: the fast tier keeps a few of these
async def test_a_next_edit_asked_while_a_completion_is_on_its_way_waits_for_it_and_its_prefetch(lsp_client):
    """The editors ask for a next edit once typing pauses, while the completion for the
    last key is still being computed: the completion after its acceptance is computed
    first (the next edit taking the engine, it was not, and Tab waited seconds)."""
    uri = "file:///project/both.py"
    text = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    "
    open_document(lsp_client, uri, text)
    completing = asyncio.ensure_future(inline(lsp_client, uri, 5, 4))
    asking = asyncio.ensure_future(inline_edit(lsp_client, uri, 1, 5, 4))
    shown = (await completing).items[0].insert_text
    await asking
    assert (await stats(lsp_client))["prefetches"] == 1  # the prefetch ran: the next edit waited for it
    insert(lsp_client, uri, 2, 5, 4, shown)  # Tab
    lines = shown.split("\n")
    await inline(lsp_client, uri, 5 + len(lines) - 1, 4 + len(shown) if len(lines) == 1 else len(lines[-1]))
    current = await stats(lsp_client)
    assert (current["prefetch_hits"], current["edit_requests"]) == (1, 1)

"""textDocument/inlineCompletion from the real server process and the real smol pair."""

import asyncio

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from completer.lsp import protocol
from completer.lsp.documents import units
from lsp_session import inline, insert, open_document, ready, start, stats, wait_ready, warm

pytestmark = pytest.mark.slow  # minutes of real model passes: the full suite's, not the fast tier's

STATS_PY = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    "
# A list the model goes on filling: a generation that runs until stopped.
LONG = "def numbers():\n    return [\n        1,\n        2,\n        3,\n        "


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_client(smol, smol_cache):
    """One server for the tests marked `shares_the_server`: each has its documents to itself
    (closed before another opens the same) and counts what changed while it ran, so the
    ones before it leave nothing it reads."""
    lsp_client = await ready(smol_cache)
    yield lsp_client
    await lsp_client.shutdown_session()


shares_the_server = pytest.mark.asyncio(loop_scope="module")  # shared_client's event loop


@shares_the_server
async def test_typing_then_an_inline_completion_gives_real_text(shared_client):
    client = shared_client
    before = await stats(client)
    uri = "file:///project/stats.py"
    open_document(client, uri, STATS_PY)
    typed = "center = mean("
    for i, char in enumerate(typed):
        insert(client, uri, i + 2, 5, 4 + i, char)
    result = await inline(client, uri, 5, 4 + len(typed))
    assert result is not None and len(result.items) == 1
    item = result.items[0]
    assert item.insert_text.startswith("values")
    assert item.range.start == item.range.end == types.Position(5, 4 + len(typed))
    assert item.command.command == "completer.accept"
    current = await stats(client)
    assert current["requests"] - before["requests"] == 1 and current["tokens_per_second"] > 0
    assert current["suggestions_shown"] - before["suggestions_shown"] == 1


@shares_the_server
async def test_mid_line_the_item_replaces_the_rest_of_the_line(shared_client):
    client = shared_client
    uri = "file:///project/mid.py"
    open_document(client, uri, STATS_PY + "center = mean()\n")
    result = await inline(client, uri, 5, len("    center = mean("))
    item = result.items[0]
    assert item.insert_text.endswith(")") and item.insert_text != ")"
    assert item.range.end == types.Position(5, len("    center = mean()"))


@shares_the_server
@pytest.mark.parametrize("text", [
    "import os\n\nBASE = os.path.dirname(os.path.abspath(__file__))\nDATA = os.path.join",  # one line shown
    STATS_PY + "center = mean",  # several lines shown; after the bracket the cursor is mid-line
])
async def test_typing_an_auto_closed_bracket_into_a_shown_item_does_not_repeat_it(shared_client, text):
    """The user types the item's `(` and the editor auto-closes it: the forward cache's
    answer is the rest of the first line, with the `)` the editor already wrote."""
    client = shared_client
    before = await stats(client)
    uri = "file:///project/auto_pair.py"  # its path is in the prompt: the same for both texts, closed after each
    open_document(client, uri, text)
    line, character = text.count("\n"), len(text.split("\n")[-1])
    first = (await inline(client, uri, line, character)).items[0].insert_text.split("\n")[0]
    assert first.startswith("(") and first.endswith(")"), first  # the case to test
    insert(client, uri, 2, line, character, "()")
    item = (await inline(client, uri, line, character + 1)).items[0]
    assert (await stats(client))["forward_cache_hits"] - before["forward_cache_hits"] == 1
    assert item.insert_text == first[1:]  # not first[1:] + ")"
    assert item.range.end == types.Position(line, character + 2)
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))


async def test_accepting_an_item_counts_in_the_statistics(lsp_client):
    uri = "file:///project/accept.py"
    open_document(lsp_client, uri, STATS_PY + "center = mean(")
    item = (await inline(lsp_client, uri, 5, len("    center = mean("))).items[0]
    assert item.command.arguments[1] == 1  # the document version the completion was made for
    await lsp_client.workspace_execute_command_async(types.ExecuteCommandParams(
        item.command.command, item.command.arguments))
    current = await stats(lsp_client)
    assert current["suggestions_accepted"] == 1 and current["suggestion_acceptance_rate"] == 1.0


async def test_an_item_shown_and_taken_in_parts_then_whole_counts_each_character_once(lsp_client):
    """Copilot's didShowCompletion and didPartiallyAcceptCompletion (acceptedLength in the
    negotiated units, UTF-16 here); malformed ones are ignored with a warning, and the
    server goes on."""
    uri = "file:///project/parts.py"
    open_document(lsp_client, uri, STATS_PY + "label = '🙂 ")
    item = (await inline(lsp_client, uri, 5, len("    label = '") + 3)).items[0]
    text = item.insert_text
    assert len(text) >= 3, text
    payload = {"insertText": text, "command": {"title": item.command.title, "command": item.command.command,
                                               "arguments": item.command.arguments}}
    lsp_client.protocol.notify(protocol.DID_SHOW_COMPLETION, {"item": payload})
    lsp_client.protocol.notify(protocol.DID_SHOW_COMPLETION, {"item": payload})  # still the same item on screen
    lsp_client.protocol.notify(protocol.DID_PARTIALLY_ACCEPT_COMPLETION, {"item": payload, "acceptedLength": 2})
    for malformed in ({"item": payload}, {"item": payload, "acceptedLength": 0}, {"item": {"command": None}},
                      {"item": payload, "acceptedLength": "2"}, None):
        lsp_client.protocol.notify(protocol.DID_PARTIALLY_ACCEPT_COMPLETION, malformed)
    current = await stats(lsp_client)
    taken = len(text.encode("utf-16-le")[:4].decode("utf-16-le", errors="ignore"))  # 2 units, in characters
    assert (current["suggestions_seen"], current["suggestions_partially_accepted"], current["accepted_chars"]) == (
        1, 1, taken)
    await lsp_client.workspace_execute_command_async(types.ExecuteCommandParams(
        item.command.command, item.command.arguments))
    current = await stats(lsp_client)
    assert (current["suggestions_accepted"], current["accepted_chars"]) == (1, len(text))
    assert current["checked_chars_30s"] == current["retained_chars_30s"] == 0  # not yet checked


async def test_several_candidates_are_items_each_with_its_own_acceptance(smol, smol_cache):
    """generation.candidates 3: distinct items (VS Code cycles through them, as the Neovim
    plugin does), each replacing the same range, each counted when taken."""
    client = await ready(smol_cache, {"generation": {"candidates": 3}})
    uri = "file:///project/candidates.py"
    open_document(client, uri, STATS_PY + "label = '")
    result = await inline(client, uri, 5, len("    label = '"))
    texts = [item.insert_text for item in result.items]
    assert 2 <= len(texts) <= 3 and len(set(texts)) == len(texts) and all(texts), texts
    assert all(item.range == result.items[0].range for item in result.items)
    ids = [item.command.arguments[0] for item in result.items]
    assert len(set(ids)) == len(ids)
    taken = result.items[1]
    await client.workspace_execute_command_async(types.ExecuteCommandParams(
        taken.command.command, taken.command.arguments))
    current = await stats(client)
    assert (current["suggestions_shown"], current["suggestions_accepted"]) == (1, 1)
    assert current["accepted_chars"] == len(taken.insert_text)  # the second candidate's characters
    await client.shutdown_session()


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
async def test_positions_count_the_negotiated_code_units_on_emoji_and_cjk(smol, smol_cache, encoding):
    client = await start(smol_cache, encodings=[encoding])
    assert client.init_result.capabilities.position_encoding == encoding
    await wait_ready(client)
    uri = "file:///project/unicode.py"
    before = '    label = "😀 平均 😀"; center = '
    open_document(client, uri, STATS_PY + before[4:] + "\n")
    # Type after the emoji and CJK, at a position counted in the encoding's units.
    insert(client, uri, 2, 5, units(before, encoding), "mean(")
    line = before + "mean("
    result = await inline(client, uri, 5, units(line, encoding))
    item = result.items[0]
    assert item.insert_text.startswith("values")
    assert item.range.start == item.range.end == types.Position(5, units(line, encoding))
    await client.shutdown_session()


async def test_a_superseded_request_returns_no_stale_text(smol, smol_cache):
    client = await ready(smol_cache, {"generation": {"max_tokens": 400, "time_budget_ms": 0}})
    uri = "file:///project/long.py"
    open_document(client, uri, LONG)
    older = asyncio.create_task(inline(client, uri, 5, 8))
    await asyncio.sleep(1.0)  # the older request is generating
    insert(client, uri, 2, 5, 8, "4")
    newer = asyncio.create_task(inline(client, uri, 5, 9))
    assert await older is None
    result = await newer
    assert result is not None and result.items[0].range.start == types.Position(5, 9)
    assert (await stats(client))["superseded"] == 1
    await client.shutdown_session()


async def test_cancel_request_stops_the_generation_and_the_server_goes_on(smol, smol_cache):
    client = await ready(smol_cache, {"generation": {"max_tokens": 400, "time_budget_ms": 0}})
    uri = "file:///project/long.py"
    open_document(client, uri, LONG)
    request = asyncio.create_task(client.protocol.send_request_async(
        types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionParams(
            context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Invoked),
            text_document=types.TextDocumentIdentifier(uri), position=types.Position(5, 8)), msg_id="long-one"))
    await asyncio.sleep(1.0)
    client.cancel_request(types.CancelParams(id="long-one"))
    with pytest.raises(JsonRpcException, match="cancel"):
        await request
    await asyncio.sleep(0.5)  # the generation stops at its next round
    assert (await stats(client))["superseded"] == 1
    open_document(client, "file:///project/stats.py", STATS_PY + "center = mean(")
    result = await inline(client, "file:///project/stats.py", 5, len("    center = mean("))
    assert result.items[0].insert_text.startswith("values")
    await client.shutdown_session()


@shares_the_server
async def test_a_position_outside_the_document_is_an_invalid_params_error(shared_client):
    client = shared_client
    uri = "file:///project/short.py"
    open_document(client, uri, "x = 1\n")
    with pytest.raises(JsonRpcException, match="outside the document"):
        await inline(client, uri, 7, 0)
    with pytest.raises(JsonRpcException, match="not open"):
        await inline(client, "file:///project/never-opened.py", 0, 0)
    assert (await stats(client))["ready"]  # still serving


async def test_a_warmed_document_completes_from_the_cache_and_the_workspace_is_indexed(smol, smol_cache, tmp_path):
    """completer/warm at the cursor of a just-opened file: the first completion there finds
    its whole prompt but the last token in the cache. The workspace folder's file is
    indexed for drafting meanwhile."""
    (tmp_path / "helpers.py").write_text("".join(f"def helper_{i}(value):\n    return value * {i}\n"
                                                 for i in range(40)))
    client = await start(smol_cache, root=tmp_path)
    try:
        await wait_ready(client)
        uri = (tmp_path / "big.py").as_uri()
        text = "".join(f"def function_{i}(x):\n    return x + {i}\n\n" for i in range(200))
        open_document(client, uri, text)
        line = text.count("\n")
        warm(client, uri, line, 0)
        deadline = asyncio.get_running_loop().time() + 120
        while not (current := await stats(client))["warmed_tokens"] or not current["index_files"]:
            assert asyncio.get_running_loop().time() < deadline, current
            await asyncio.sleep(0.1)
        assert current["index_files"] == 1 and current["index_tokens"] > 500
        result = await inline(client, uri, line, 0)
        assert result is not None and "def function_200(x):" in result.items[0].insert_text
        after = await stats(client)
        # One prompt, every token of it but the last found in the cache.
        assert after["cache_hit_rate"] > 0.99
        warm(client, "file:///not/open.py", 0, 0)  # not open: logged, no answer, the server goes on
        warm(client, uri, 10_000, 0)  # outside the document: the same
        assert (await stats(client))["ready"]
    finally:
        await client.shutdown_session()


async def shown_then_computed_ahead(client, uri: str) -> str:
    """The suggestion at the end of STATS_PY, once the server has started computing the
    one after its acceptance (a user reads a suggestion longer than that takes to start)."""
    open_document(client, uri, STATS_PY)
    shown = (await inline(client, uri, 5, 4)).items[0].insert_text
    while (await stats(client))["prefetches"] < 1:
        await asyncio.sleep(0.02)
    return shown


async def test_after_a_whole_suggestion_is_accepted_the_next_one_was_computed_while_it_was_shown(lsp_client):
    uri = "file:///project/ahead.py"
    shown = await shown_then_computed_ahead(lsp_client, uri)
    insert(lsp_client, uri, 2, 5, 4, shown)  # Tab: the editor puts the item in, the cursor after it
    lines = shown.split("\n")
    end = types.Position(5 + len(lines) - 1, 4 + len(shown) if len(lines) == 1 else len(lines[-1]))
    result = await inline(lsp_client, uri, end.line, end.character)
    assert (await stats(lsp_client))["prefetch_hits"] == 1
    assert result is None or result.items[0].range.start == end


async def test_a_suggestion_computed_ahead_is_not_given_after_anything_but_its_acceptance(lsp_client):
    uri = "file:///project/other.py"
    shown = await shown_then_computed_ahead(lsp_client, uri)
    typed = "#" if not shown.startswith("#") else "x"
    insert(lsp_client, uri, 2, 5, 4, typed)  # the user typed something else than the suggestion
    await inline(lsp_client, uri, 5, 5)
    insert(lsp_client, uri, 3, 5, 5, shown)  # the suggestion's text, after the other keystroke
    await inline(lsp_client, uri, 5 + shown.count("\n"), len((STATS_PY + typed + shown).split("\n")[-1]))
    assert (await stats(lsp_client))["prefetch_hits"] == 0

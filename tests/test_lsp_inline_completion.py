"""textDocument/inlineCompletion from the real server process and the real smol pair."""

import pytest
from lsprotocol import types

from lsp_session import inline, insert, open_document, start, stats, wait_ready

STATS_PY = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    "


@pytest.fixture
async def client(smol, smol_cache):
    lsp_client = await start(smol_cache)
    await wait_ready(lsp_client)
    yield lsp_client
    await lsp_client.shutdown_session()


async def test_typing_then_an_inline_completion_gives_real_text(client):
    uri = "file:///project/stats.py"
    open_document(client, uri, STATS_PY)
    typed = "center = mean("
    for i, char in enumerate(typed):
        insert(client, uri, i + 2, 5, 4 + i, char)
    result = await inline(client, uri, 5, 4 + len(typed))
    assert result is not None and len(result.items) == 1
    item = result.items[0]
    assert item.insert_text.strip() and item.insert_text.startswith("values")
    assert item.range.start == types.Position(5, 4 + len(typed))
    assert item.command.command == "completer.accept"
    current = await stats(client)
    assert current["requests"] == 1 and current["suggestions_shown"] == 1

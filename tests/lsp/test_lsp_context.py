"""The definitions a completion calls, through the real language server: the index is
built in the background and its size is in the statistics, completer/prompt says what the
last completion's prompt showed and why, a rename saved in another file is what the next
prompt shows, and a secret file stays out of every prompt and gets no completion."""

import asyncio
import itertools
import time
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from completer.lsp import protocol
from lsp_session import inline, open_document, ready, stats
from shop_repository import CALL, TRANSPORT, write_shop

ORDERS = "from shop.client import connect\n\n\ndef latest_orders(host: str) -> bytes:\n" + CALL
ENV = 'WAREHOUSE_TOKEN="sk-live-5f1e9c0a77d2"\nWAREHOUSE_HOST="warehouse.internal"\nREGION="eu-west"\n'


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    (tmp_path / ".env").write_text(ENV)
    return write_shop(tmp_path, ORDERS)


async def indexed(client, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while (current := await stats(client))["definitions_files"] < 3:
        assert time.monotonic() < deadline, "the definitions index was not built"
        await asyncio.sleep(0.2)
    return current


async def why(client, uri: str) -> dict | None:
    """completer/prompt's answer as JSON has it (pygls hands an unknown method's objects
    over as named tuples)."""
    answer = await client.protocol.send_request_async(protocol.PROMPT, {"uri": uri})
    if answer is None:
        return None
    return {"prompt": answer.prompt, "sections": [section._asdict() for section in answer.sections]}


async def after_the_save(client, shop: Path, timeout_s: float = 60) -> str:
    """The prompt of a completion in a document like orders.py once the saved text is
    indexed (the save is read in a worker thread, after didSave is answered): a new
    document each time, so that no answer comes from the forward cache."""
    deadline = time.monotonic() + timeout_s
    for count in itertools.count():
        uri = (shop / "shop" / f"orders_{count}.py").as_uri()
        open_document(client, uri, ORDERS)
        await inline(client, uri, 5, len(ORDERS.splitlines()[5]))
        prompt = (await why(client, uri))["prompt"]
        if "freshness_budget_s" in prompt or time.monotonic() > deadline:
            return prompt
        await asyncio.sleep(0.5)


@pytest.mark.slow  # a server, the smol pair, three completions
async def test_the_prompt_shows_what_the_cursor_calls_follows_a_saved_rename_and_no_secret(smol_cache, shop):
    client = await ready(smol_cache, root=shop)
    try:
        current = await indexed(client)
        assert current["definitions"] >= 3 and current["definitions_build_ms"] > 0
        orders, env = (shop / "shop" / "orders.py").as_uri(), (shop / ".env").as_uri()
        open_document(client, env, ENV, "dotenv")
        assert await inline(client, env, 0, 16) is None  # context.exclude: no completion in it
        open_document(client, orders, ORDERS)
        assert await why(client, orders) is None  # nothing decoded yet
        await inline(client, orders, 5, len(ORDERS.splitlines()[5]))
        shown = await why(client, orders)
        paths = [section["path"] for section in shown["sections"]]
        assert paths == ["shop/client.py", "shop/transport.py"], shown["sections"]
        assert "Transport.fetch" in shown["sections"][1]["why"]
        assert "max_staleness_s: int = 30" in shown["prompt"] and "sk-live" not in shown["prompt"]

        transport = (shop / "shop" / "transport.py").as_uri()
        renamed = TRANSPORT.replace("max_staleness_s", "freshness_budget_s")
        open_document(client, transport, renamed)
        client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(transport)))
        assert "freshness_budget_s" in (shown := await after_the_save(client, shop))
        assert "max_staleness_s: int" not in shown

        with pytest.raises(JsonRpcInvalidParams):
            await client.protocol.send_request_async(protocol.PROMPT, {"uri": 7})
        assert (await stats(client))["ready"]  # and it keeps answering
    finally:
        await client.shutdown_session()

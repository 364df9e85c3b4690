"""Settings a workspace can write never choose where code and keys go: the real
`completer serve --stdio`, driven by pytest-lsp, is sent a team server's URL, decoder,
API key variable and RPC server over LSP (initializationOptions and
workspace/didChangeConfiguration carry what a checked-in .vscode/settings.json or a
Neovim project-local config says). It refuses each with a warning naming it, completes
locally, and nothing connects to the host they name. The same values as the server's
own flags are used. An option under its old name is taken with a warning naming the new
one, and refused when the new name says otherwise. A preset whose files are not here
downloads only once the user says so."""

import asyncio
import shutil
import time

import pytest
from lsprotocol import types

from completer.config import machine_options
from completer.lsp import protocol
from completer.lsp.loading import DOWNLOAD
from completer.models.presets import Preset
from hub_server import FakeHub
from listener import Listener
from lsp_session import inline, open_document, start, stats, wait_ready

STATS_PY = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    "
URI = "file:///project/stats.py"
KEY_VARIABLE = "COMPLETER_TEST_API_KEY"  # stands for GITHUB_TOKEN: a secret in the user's environment
KEY = "not-for-elsewhere"


def elsewhere(listener: Listener) -> dict:
    """What a hostile workspace's settings say: decode on, and send the key to, its host."""
    return {"decoder": "llama-server", "server_url": listener.url, "api_key_env": KEY_VARIABLE,
            "rpc_servers": listener.address}


@pytest.fixture(autouse=True)
def a_secret_in_the_environment(monkeypatch):
    monkeypatch.setenv(KEY_VARIABLE, KEY)


def refusals(client) -> set[str]:
    """The options the server said it refused (window/showMessage warnings)."""
    return {name for message in client.messages if message.type == types.MessageType.Warning
            for name in machine_options() if message.message.startswith(f"completer: {name} from the editor")}


@pytest.mark.slow  # a server of its own and the models loaded: the fast tier keeps a few of these
async def test_machine_level_options_over_lsp_are_refused_and_nothing_reaches_their_host(smol_cache):
    with Listener() as listener:
        client = await start(smol_cache, {"models": {"preset": "smol", **elsewhere(listener)}})
        ready = await wait_ready(client)
        assert ready["decoder"] == "local" and ready["target"]
        assert refusals(client) == {"models.decoder", "models.server_url", "models.api_key_env",
                                    "models.rpc_servers"}
        warning = next(m.message for m in client.messages if "models.server_url" in m.message)
        assert "--server-url" in warning  # where to set it instead
        open_document(client, URI, STATS_PY)
        assert (await inline(client, URI, 5, 4)).items[0].insert_text.strip()

        # The same through a settings change, as VS Code sends one: refused again, no reload.
        client.messages.clear()
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            {protocol.SETTINGS_SECTION: {"models": {**elsewhere(listener), "decoder": "openai"},
                                         "generation": {"max_tokens": 8}}}))
        for _ in range(50):
            if refusals(client):
                break
            await asyncio.sleep(0.1)
        assert refusals(client) == {"models.decoder", "models.server_url", "models.api_key_env",
                                    "models.rpc_servers"}
        current = await stats(client)
        assert current["ready"] and current["decoder"] == "local"
        assert (await inline(client, URI, 5, 4)).items[0].insert_text.strip()
        await client.shutdown_session()
        assert listener.accepted == 0, listener.received


async def test_the_same_options_as_the_servers_own_flags_are_used(smol_cache):
    """What the user set on the command line (VS Code's user settings become these flags):
    the server connects to that host at load, with the key from that variable."""
    with Listener() as listener:
        flags = ("--decoder", "llama-server", "--server-url", listener.url, "--api-key-env", KEY_VARIABLE)
        # The editor sending those values back as settings (an extension that sends every setting) is no refusal.
        client = await start(smol_cache, {"models": {"decoder": "llama-server", "server_url": listener.url}},
                             flags=flags)
        deadline = time.monotonic() + 30
        while not listener.received and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert listener.received and f"Authorization: Bearer {KEY}".encode() in listener.received[0]
        assert (await stats(client))["decoder"] == "llama-server"
        assert refusals(client) == set()
        await client.shutdown_session()


def warnings(client) -> list[str]:
    return [message.message for message in client.messages if message.type == types.MessageType.Warning]


async def until_warned(client, text: str) -> list[str]:
    for _ in range(50):
        if any(text in message for message in warnings(client)):
            break
        await asyncio.sleep(0.1)
    return warnings(client)


async def test_an_old_option_name_is_taken_with_a_warning_and_refused_when_the_new_name_differs(smol_cache):
    """prompt.context_tokens is prompt.cross_file_tokens's old name, from initializationOptions
    (a Neovim setup()) and from a settings change (VS Code's deprecated setting)."""
    client = await start(smol_cache, {"prompt": {"context_tokens": 512}})
    assert "completer: prompt.context_tokens is deprecated: its value is read as prompt.cross_file_tokens, " \
           "its new name; rename it where it is set" in await until_warned(client, "deprecated")
    client.messages.clear()
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        {protocol.SETTINGS_SECTION: {"prompt": {"context_tokens": 256, "cross_file_tokens": 768}}}))
    assert "completer: prompt.context_tokens = 256 and prompt.cross_file_tokens = 768 are one option, under its old " \
           "name and its new one, given two values: set prompt.cross_file_tokens alone; keeping 512" \
           in await until_warned(client, "one option")
    client.messages.clear()
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        {protocol.SETTINGS_SECTION: {"prompt": {"context_tokens": None, "cross_file_tokens": 768}}}))
    await stats(client)  # answered after the settings change: any warning it made came before
    assert warnings(client) == []
    await client.shutdown_session()


BIG = Preset.from_name("qwen3-coder-30b-a3b")  # some 32 GB from the Hub
ALLOWED = Preset.from_name("qwen2.5-coder-3b")


def change_preset(client, preset: str, **generation) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        {protocol.SETTINGS_SECTION: {"models": {"preset": preset}, "generation": {"max_tokens": 16, **generation}}}))


@pytest.mark.slow  # a server of its own, and the models loaded twice
async def test_a_preset_from_the_editors_settings_downloads_only_on_the_users_word(smol, smol_cache, tmp_path,
                                                                                   monkeypatch):
    """The Hub (HF_ENDPOINT) has the presets' files (the smol draft under their names). Named
    in the settings, the big one is asked about in one window/showMessageRequest; dismissed,
    nothing reaches the Hub and smol serves on. Another one, answered Download, is downloaded
    and loaded."""
    cache = tmp_path / "cache"
    shutil.copytree(smol_cache / "derived", cache / "derived")  # smol's files: converted and derived
    served = {(file.repo, file.filename): smol.draft for preset in (BIG, ALLOWED)
              for file in (preset.target, preset.draft)}
    questions: list[types.ShowMessageRequestParams] = []
    answers = iter([None, types.MessageActionItem(DOWNLOAD)])
    with FakeHub(served) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        client = await start(cache)

        @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
        def answer(params):
            questions.append(params)
            return next(answers)

        smol_target = (await wait_ready(client))["target"]
        change_preset(client, BIG.name)
        for _ in range(100):
            if questions:
                break
            await asyncio.sleep(0.1)
        assert hub.requests == []
        assert [question.message for question in questions] == [
            f"completer: models.preset {BIG.name} from the editor's settings is not on this machine: loading it "
            f"downloads {BIG.target.describe()} and {BIG.draft.describe()} (size not recorded; {BIG.why}). A "
            "workspace's settings may name it, so it waits for your word: keeping smol. Download it now, or run "
            f"`completer models pull {BIG.name}` (it then loads when the server starts again)."]
        assert [action.title for action in questions[0].actions] == [DOWNLOAD]
        # Named again (VS Code sends every setting at each change): not asked again.
        change_preset(client, BIG.name, max_tokens=8)
        current = await stats(client)
        assert current["ready"] and current["target"] == smol_target and len(questions) == 1
        assert hub.requests == []  # smol serves on, and nothing was asked of the Hub

        change_preset(client, ALLOWED.name)
        deadline = time.monotonic() + 120
        while (current := await stats(client))["target"] != ALLOWED.target.filename or not current["ready"]:
            assert not current["error"] and time.monotonic() < deadline, current
            await asyncio.sleep(0.2)
        assert len(questions) == 2
        assert {path for _, path in hub.requests} == {f"/{file.repo}/resolve/{file.revision}/{file.filename}"
                                                      for file in (ALLOWED.target, ALLOWED.draft)}
        await client.shutdown_session()

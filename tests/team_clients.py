"""A team server (llama-server or vLLM) through the language server, as the tests of both
drive it: editors typing at once, each in a document of its own (none may get another's
text); a generation superseded while it runs; the server killed and started again."""

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from pytest_lsp import LanguageClient

from lsp_session import inline, insert, open_document, ready, stats

# Each client's document names its own things; an answer naming another client's
# would be another client's prompt or cache leaking into it.
CLIENT_WORDS = ["alpha", "bravo", "charlie", "delta"]


def client_document(word: str) -> str:
    return (f"def {word}_total({word}_values):\n    {word}_sum = 0\n    for {word}_item in {word}_values:\n"
            f"        {word}_sum += {word}_item\n    return {word}_sum\n\n\ndef {word}_mean({word}_values):\n    ")


async def typing_client(cache: Path, options: dict, flags: tuple[str, ...], word: str,
                        requests: int) -> list[str | None]:
    """One editor typing into its own document on the server `flags` name: a request after
    each keystroke, and every fifth keystroke a second one at once (the first is then
    superseded). No message about the server reaches the editor."""
    client = await ready(cache, options, flags=flags)
    uri = f"file:///project/{word}.py"
    text = client_document(word)
    open_document(client, uri, text)
    line, column, answers = text.count("\n"), len("    "), []
    typed = f"return {word}_total({word}_values) / len({word}_values)  # "
    for index in range(requests):
        insert(client, uri, index + 2, line, column, typed[index % len(typed)])
        column += 1
        pending = [asyncio.create_task(inline(client, uri, line, column))]
        if index % 5 == 4:
            pending.append(asyncio.create_task(inline(client, uri, line, column)))
        for result in await asyncio.gather(*pending):
            answers.append(result.items[0].insert_text if result else None)
    current = await stats(client)
    # The first of two requests at once may end in the debounce, which lsp.back_off
    # lengthens on a shared server, before the completer counts it.
    pairs = requests // 5
    assert not current["server_error"] and len(answers) - pairs <= current["requests"] <= len(answers), current
    url = flags[flags.index("--server-url") + 1]
    assert not [m for m in client.messages if url in m.message]
    await client.shutdown_session()
    return answers


def check_own_text(results: list[list[str | None]], requests: int) -> None:
    """Each client's answers (in CLIENT_WORDS' order): every request answered (or empty,
    superseded), none naming another client's things, and most keystrokes suggested to."""
    for word, answers in zip(CLIENT_WORDS, results):
        assert len(answers) == requests + requests // 5
        others = [other for other in CLIENT_WORDS if other != word]
        leaked = [answer for answer in answers if answer and any(other in answer for other in others)]
        assert not leaked, (word, leaked)
        assert sum(1 for answer in answers if answer) >= requests // 2


# A list the model goes on filling: a generation that runs until stopped.
LONG = "def numbers():\n    return [\n        1,\n        2,\n        3,\n        "
LONG_URI = "file:///project/long.py"
# Generations of it still run when a newer request comes 1.5 s in, and the newer one ends
# within seconds however busy the machine is (the stream closes at a line end past it).
LONG_RUN = {"max_tokens": 400, "time_budget_ms": 3000}


async def supersede_a_running_generation(client: LanguageClient) -> None:
    """In LONG, a request generating on the server when a keystroke's newer one comes: the
    older is answered empty, the newer not, and the statistics count one superseded."""
    open_document(client, LONG_URI, LONG)
    older = asyncio.create_task(inline(client, LONG_URI, 5, 8))
    await asyncio.sleep(1.5)  # the older request is generating on the server
    insert(client, LONG_URI, 2, 5, 8, "4")
    newer = asyncio.create_task(inline(client, LONG_URI, 5, 9))  # the newest request wins
    assert await older is None
    assert (await newer) is not None, (await stats(client), client.messages)
    assert (await stats(client))["superseded"] == 1


async def killed_then_restarted(client: LanguageClient, url: str, kill: Callable[[], None],
                                restart: Callable[[], None], back_s: float) -> list[str]:
    """The server at `url` killed during a request in LONG, keystrokes while it is down,
    then restarted: the editor hears of it once, the statistics say it while it lasts,
    and completions come again within `back_s` of the restart. The one message."""
    open_document(client, LONG_URI, LONG)
    request = asyncio.create_task(inline(client, LONG_URI, 5, 8))
    await asyncio.sleep(1.0)
    kill()
    assert await request is None
    for _ in range(4):  # keystrokes while it is down, past the first retry: empty answers, no new message
        assert await inline(client, LONG_URI, 5, 8) is None
        await asyncio.sleep(0.6)
    warnings = [m.message for m in client.messages if url in m.message]
    assert len(warnings) == 1, warnings
    assert url in (await stats(client))["server_error"]
    restart()
    deadline = time.monotonic() + back_s  # the retries back off: 1 s, 2 s, 4 s ... 30 s
    while await inline(client, LONG_URI, 5, 8) is None:
        assert time.monotonic() < deadline, "no completion after the server came back"
        await asyncio.sleep(0.3)
    assert [m.message for m in client.messages if url in m.message] == warnings
    assert not (await stats(client))["server_error"]
    assert any("answers again" in m.message for m in client.log_messages)
    return warnings

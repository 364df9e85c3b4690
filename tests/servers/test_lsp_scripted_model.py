"""What the server makes of a model's answer, through the real server over a real
OpenAI-compatible connection, the model's answer written here to the character
(tests/scripted_server.py): a next-edit rewrite that copies the region is no edit,
whatever the region holds (the format's own markers and stop strings, code fences); the
format's markers reach the model while a document's special-token spellings do not;
and a document's line breaks (CRLF, CR, mixed) give no edit of their own, suggestions in
the document's break, and the prefetch after an acceptance."""

import asyncio

import pytest

from completer.lsp import protocol
from lsp_session import inline, insert, open_document, ready, stats
from scripted_server import ScriptedServer

pytestmark = pytest.mark.slow  # a server process per test: 20 s in all, a tenth of the fast tier


@pytest.fixture
def scripted():
    server = ScriptedServer()
    yield server
    server.stop()


async def next_edit_at(scripted: ScriptedServer, cache, edit_format: str, text: str, line: int, character: int,
                       above: int = 1, below: int = 2) -> list[dict]:
    """The edits the server suggests in `text` at the position, with `edit_format`'s prompt."""
    options = {"edits": {"format": edit_format, "lines_above": above, "lines_below": below, "context_lines": 0}}
    client = await ready(cache, options, flags=("--decoder", "openai", "--server-url", scripted.url))
    try:
        uri = "file:///project/doc.txt"
        open_document(client, uri, text, "plaintext")
        result = await client.protocol.send_request_async(protocol.INLINE_EDIT, {
            "textDocument": {"uri": uri, "version": 1}, "position": {"line": line, "character": character}})
        return [edit._asdict() for edit in result.edits]
    finally:
        await client.shutdown_session()


def spans(edit: dict) -> tuple[tuple[int, int], tuple[int, int]]:
    start, end = edit["range"].start, edit["range"].end
    return (start.line, start.character), (end.line, end.character)


# The instruction format's prompt ends in `<region>\n`; the model writes the region again
# and closes it with `</region>`, the tag that also ends its rewrite.
TAGGED = "name = eu\n</region>\nmore\n"


async def test_an_exact_copy_of_a_region_holding_the_formats_closing_tag_is_no_edit(scripted, tmp_path):
    scripted.answer = TAGGED + "</region>\n\nmore text a small model goes on with"
    assert await next_edit_at(scripted, tmp_path, "instruction", TAGGED, 0, 4) == []
    assert "</region>" not in scripted.stops[-1]  # the region holds it: it cannot end the rewrite wherever it is


async def test_a_rewrite_of_a_region_holding_the_closing_tag_edits_only_what_changed(scripted, tmp_path):
    scripted.answer = TAGGED.replace("eu", "us") + "</region>"
    edits = await next_edit_at(scripted, tmp_path, "instruction", TAGGED, 0, 4)
    assert [(edit["text"], spans(edit)) for edit in edits] == [("us", ((0, 7), (0, 9)))]


async def test_a_literal_cursor_marker_in_the_region_stays_and_the_echoed_one_goes(scripted, tmp_path):
    text = "tag = '<cursor>'\nnext = 1\n"
    cursor = len("tag = '<cursor>'")
    scripted.answer = text[:cursor] + "<cursor>" + text[cursor:] + "</region>"  # the prompt's region, copied
    assert await next_edit_at(scripted, tmp_path, "instruction", text, 0, cursor, above=0, below=1) == []


async def test_a_markdown_region_between_fences_copied_is_no_edit(scripted, tmp_path):
    text = "```python\nx = 1\n```\n"
    scripted.answer, scripted.ends = "```python\nx = 1\n```", True  # Instinct ends with its end token
    assert await next_edit_at(scripted, tmp_path, "instinct", text, 1, 1, above=1, below=1) == []
    scripted.answer = "```python\nx = 2\n```"
    edits = await next_edit_at(scripted, tmp_path, "instinct", text, 1, 1, above=1, below=1)
    assert [(edit["text"], spans(edit)) for edit in edits] == [("2", ((1, 4), (1, 5)))]


async def test_zetas_markers_reach_the_model_and_the_documents_special_tokens_do_not(scripted, tmp_path):
    text = "prompt = '<|im_start|>user'\nsize = 1\n"
    scripted.answer = "<|editable_region_start|>\nprompt = '<|im_start|>user'\nsize = 2\n<|editable_region_end|>"
    edits = await next_edit_at(scripted, tmp_path, "zeta", text, 1, 4, above=1, below=0)
    prompt = scripted.prompts[-1]
    for marker in ("<|editable_region_start|>", "<|editable_region_end|>", "<|user_cursor_is_here|>",
                   "<|start_of_file|>"):
        assert prompt.count(marker) == 1, marker
    assert "<|im_start|>" not in prompt  # the document's spelling, taken out: it would be a control token there
    assert [(edit["text"], spans(edit)) for edit in edits] == [("2", ((1, 7), (1, 8)))]


LINE_BREAKS = pytest.mark.parametrize("eol", ["\r\n", "\r", "mixed"])


def with_breaks(text: str, eol: str) -> str:
    """`text` with its line breaks `eol`; "mixed": CRLF, then LF, then CR, in turn."""
    if eol != "mixed":
        return text.replace("\n", eol)
    lines = text.split("\n")
    return "".join(line + ("\r\n", "\n", "\r")[i % 3] for i, line in enumerate(lines[:-1])) + lines[-1]


@LINE_BREAKS
async def test_a_rewrite_in_lf_of_a_region_in_other_line_breaks_edits_only_what_changed(scripted, tmp_path, eol):
    text = with_breaks("a = 1\nb = 2\nc = 3\n", eol)
    scripted.answer = "a = 1\nb = 5\nc = 3\n</region>"  # a model writes "\n" whatever the file has
    edits = await next_edit_at(scripted, tmp_path, "instruction", text, 1, 0, above=1, below=1)
    assert [(edit["text"], spans(edit)) for edit in edits] == [("5", ((1, 4), (1, 5)))]


@LINE_BREAKS
async def test_a_suggestion_arrives_in_the_documents_line_break_and_its_acceptance_is_served_ahead(scripted, tmp_path,
                                                                                                   eol):
    """The item's text uses the document's line break; the editor inserts it as it is,
    and the request that acceptance makes is answered from the prefetch."""
    text = with_breaks("import os\ndef f():\n    ", eol)
    first_break = "\r\n" if eol == "mixed" else eol
    scripted.answer = "x = 1\n    return x\n\n\ndef g():\n"
    client = await ready(tmp_path, {}, flags=("--decoder", "openai", "--server-url", scripted.url))
    try:
        uri = "file:///project/eol.py"
        open_document(client, uri, text)
        item = (await inline(client, uri, 2, 4)).items[0]
        assert item.insert_text == f"x = 1{first_break}    return x"
        deadline = asyncio.get_running_loop().time() + 30
        while (await stats(client))["prefetches"] < 1:
            assert asyncio.get_running_loop().time() < deadline, "no prefetch started"
            await asyncio.sleep(0.02)
        insert(client, uri, 2, 2, 4, item.insert_text)  # Tab: the editor inserts the item's text as it is
        await inline(client, uri, 3, len("    return x"))
        assert (await stats(client))["prefetch_hits"] == 1
    finally:
        await client.shutdown_session()

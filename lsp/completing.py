"""From an LSP position to a completion and back to LSP items."""

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.uris import to_fs_path

from completer.lsp import protocol
from completer.lsp.documents import Document
from completer.session import CompletionRequest, PositionError

if TYPE_CHECKING:
    from completer.lsp.server import CompleterServer


@dataclass(frozen=True)
class Answer:
    document: Document
    position: types.Position  # the cursor, in client units
    text: str  # to insert at the cursor


async def complete_at(ls: "CompleterServer", uri: str, position: types.Position) -> Answer | None:
    """The completion at `position`, or None: models not ready, superseded by a newer
    request, cancelled, nothing worth showing, or the document changed meanwhile."""
    document = ls.documents.get(uri)
    if document is None:
        raise JsonRpcInvalidParams(f"{uri} is not open: send textDocument/didOpen first")
    try:
        offset = document.offset_at(position, ls.encoding, strict=True)
    except PositionError as error:  # wrong whether or not the models are loaded yet
        raise JsonRpcInvalidParams(str(error)) from None
    completer = ls.completer
    if completer is None:
        return None
    text, version = document.text, document.version
    line_start = text.rfind("\n", 0, offset) + 1
    request = CompletionRequest(uri, to_fs_path(uri) or uri, text, text.count("\n", 0, offset), offset - line_start,
                                document.language)
    cancel = completer.begin(uri)
    if ls.config.server.debounce_ms > 0:
        await asyncio.sleep(ls.config.server.debounce_ms / 1000)
        if cancel.is_set():
            return None
    try:
        completion = await ls.loop.run_in_executor(ls.workers, completer.complete, request, cancel)
    except asyncio.CancelledError:  # $/cancelRequest: stop the generation at its next round
        cancel.set()
        raise
    if completion.warning and not ls.draft_failure_shown:  # once: the stats keep saying it
        ls.draft_failure_shown = True
        ls.tell(types.MessageType.Warning, completion.warning, show=True)
    if not completion.text or document.version != version or document.text != text:
        return None
    return Answer(document, position, completion.text)


def _accept_command(ls: "CompleterServer", answer: Answer) -> types.Command:
    ls.suggestions.shown += 1
    return types.Command("Accept completion", protocol.ACCEPT_COMMAND,
                         arguments=[next(ls.item_ids), answer.document.version])


def inline_items(ls: "CompleterServer", answer: Answer) -> types.InlineCompletionList:
    """One item replacing the rest of the cursor's line: the completion, then what
    followed the cursor (post-processing cut it from the completion), so that editors
    show the completion as ghost text before it."""
    document = answer.document
    cursor = document.offset_at(answer.position, ls.encoding)
    line_end = document.line_end(answer.position.line)
    rest = document.text[cursor:line_end]
    insert = answer.text + rest if rest.strip() else answer.text
    end = document.position_at(line_end, ls.encoding)
    item = types.InlineCompletionItem(insert, range=types.Range(answer.position, end),
                                      command=_accept_command(ls, answer))
    return types.InlineCompletionList([item])


def completion_items(ls: "CompleterServer", answer: Answer) -> types.CompletionList:
    """For clients without inline completion: one item, marked as AI. Incomplete, so that
    the client asks again as the user types."""
    first_line = answer.text.strip().split("\n", 1)[0]
    item = types.CompletionItem(
        label=first_line[:60] or answer.text[:60],
        label_details=types.CompletionItemLabelDetails(description="AI · completer"),
        kind=types.CompletionItemKind.Snippet,
        detail="AI completion (completer)",
        documentation=types.MarkupContent(types.MarkupKind.PlainText, answer.text),
        text_edit=types.TextEdit(types.Range(answer.position, answer.position), answer.text),
        insert_text_format=types.InsertTextFormat.PlainText,
        sort_text="0",
        command=_accept_command(ls, answer),
    )
    return types.CompletionList(is_incomplete=True, items=[item])

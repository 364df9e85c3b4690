"""From an LSP position to a completion and back to LSP items: values in, values out;
the server keeps the state (documents, counters, what the user was told)."""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.uris import to_fs_path

from completer.editor.completer import Completer
from completer.editor.documents import EDIT, INLINE
from completer.errors import PositionError
from completer.lsp import protocol
from completer.lsp.documents import Document
from completer.requests import Completion, CompletionRequest, NextEdit

# Runs a blocking call off the event loop (the server's worker threads).
InWorker = Callable[..., Awaitable]


@dataclass(frozen=True)
class Answer:
    document: Document
    position: types.Position  # the cursor, in client units
    cursor: int  # the same, as an offset into the document's text
    text: str  # to insert at the cursor
    alternatives: tuple[str, ...] = ()  # other candidates, shown after it on request

    @property
    def texts(self) -> tuple[str, ...]:
        """Every candidate, the completion first."""
        return (self.text, *self.alternatives)


def request_at(document: Document | None, uri: str, position: types.Position, encoding: str) -> CompletionRequest:
    """The request for a completion at `position`; an invalid-params error for a document
    not open or a position outside it (wrong whether or not the models are loaded)."""
    if document is None:
        raise JsonRpcInvalidParams(f"{uri} is not open: send textDocument/didOpen first")
    try:
        cursor = document.offset_at(position, encoding, strict=True)
    except PositionError as error:
        raise JsonRpcInvalidParams(str(error)) from None
    return CompletionRequest(uri, to_fs_path(uri) or uri, document.text, cursor, document.language, document.closed)


def document_position(params: Any) -> tuple[str, int | None, types.Position] | None:
    """(uri, version or None, position) of params shaped {"textDocument": {"uri",
    "version"?}, "position": {"line", "character"}} (a custom method's, which pygls
    hands over unchecked); None when they are not."""
    document = getattr(params, "textDocument", None)
    uri, version = getattr(document, "uri", None), getattr(document, "version", None)
    position = getattr(params, "position", None)
    line, character = getattr(position, "line", None), getattr(position, "character", None)
    numbers = (line, character) + ((version,) if version is not None else ())
    if not isinstance(uri, str) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
        return None
    return uri, version, types.Position(line, character)


def inline_edit_params(params: Any) -> tuple[str, int | None, types.Position]:
    """(uri, version or None, position) of an INLINE_EDIT request; invalid params otherwise."""
    found = document_position(params)
    if found is None:
        raise JsonRpcInvalidParams(f"{protocol.INLINE_EDIT} takes {{\"textDocument\": {{\"uri\", \"version\"}}, "
                                   "\"position\": {\"line\", \"character\"}}")
    return found


async def next_edit(completer: Completer, request: CompletionRequest, in_worker: InWorker) -> NextEdit:
    """The next edit, computed in a worker; $/cancelRequest stops it at its next round.
    The request is running from here on (a newer one cancels it) and no longer once this
    ends, also where it is cancelled before its worker starts: this owns it (Completer.request)."""
    with completer.request(request.document, EDIT) as cancel:
        try:
            return await in_worker(completer.next_edit, request, cancel)
        except asyncio.CancelledError:
            cancel.set()
            raise


def edit_items(document: Document, version: int, request: CompletionRequest, edit: NextEdit, encoding: str,
               suggestion_id: int) -> dict[str, list]:
    """INLINE_EDIT's result: each edit with its range in the client's units, the document
    version it is for and the commands that say it was accepted or dismissed; none when
    the document changed since the request (made at `version`)."""
    if document.version != version or document.text != request.text:
        return {"edits": []}
    identity = {"uri": document.uri, "version": version}
    items = []
    arguments = [suggestion_id, version]  # the edits of one suggestion are shown, taken or dismissed together
    for change in edit.edits:
        start, end = document.position_at(change.start, encoding), document.position_at(change.end, encoding)
        items.append({"text": document.leaving(change.text), "textDocument": identity,
                      "range": {"start": {"line": start.line, "character": start.character},
                                "end": {"line": end.line, "character": end.character}},
                      "command": {"title": "Accept next edit", "command": protocol.ACCEPT_EDIT_COMMAND,
                                  "arguments": arguments}})
    return {"edits": items}


async def complete(completer: Completer, request: CompletionRequest, debounce_ms: float,
                   in_worker: InWorker) -> Completion | None:
    """The completion, or None when a newer request for the document superseded it while
    it waited out the debounce. The request is running from here on (a newer one cancels
    it, and no prefetch starts) and no longer once this ends, also where $/cancelRequest
    ends it in the debounce."""
    with completer.request(request.document, INLINE) as cancel:
        if debounce_ms > 0:
            await asyncio.sleep(debounce_ms / 1000)
            if cancel.is_set():
                return None
        try:
            return await in_worker(completer.complete, request, cancel)
        except asyncio.CancelledError:  # $/cancelRequest: stop the generation at its next round
            cancel.set()
            raise


def answer_for(document: Document, version: int, request: CompletionRequest, position: types.Position,
               completion: Completion) -> Answer | None:
    """What to show, or None: nothing worth showing, or the document changed since the
    request was made at `version`."""
    if not completion.text or document.version != version or document.text != request.text:
        return None
    return Answer(document, position, request.cursor, completion.text, tuple(completion.alternatives))


def after_acceptance(answer: Answer) -> CompletionRequest | None:
    """The request an editor makes once the user accepts the whole answer: the text with
    it inserted, the cursor after it. None where text follows the cursor on its line:
    there the item re-inserts that text, and the editors leave the cursor in different
    places (VS Code after it, the Neovim plugin before it), so no one request is sure to come."""
    document = answer.document
    if document.line_end_at(answer.cursor) != answer.cursor:
        return None
    text = document.text[: answer.cursor] + answer.text + document.text[answer.cursor :]
    return CompletionRequest(document.uri, to_fs_path(document.uri) or document.uri, text,
                             answer.cursor + len(answer.text), document.language, document.closed)


def _accept_command(answer: Answer, item_id: int) -> types.Command:
    return types.Command("Accept completion", protocol.ACCEPT_COMMAND, arguments=[item_id, answer.document.version])


def inline_items(answer: Answer, encoding: str, item_ids: list[int]) -> types.InlineCompletionList:
    """An item per candidate (ids in `item_ids`, as answer.texts), each replacing the rest
    of the cursor's line: the candidate, then what followed the cursor (post-processing
    cut it from the candidate), so that editors show the candidate as ghost text before it."""
    document = answer.document
    line_end = document.line_end_at(answer.cursor)
    rest = document.text[answer.cursor : line_end]
    end = document.position_at(line_end, encoding)
    return types.InlineCompletionList([
        types.InlineCompletionItem(document.leaving(text + rest if rest.strip() else text),
                                   range=types.Range(answer.position, end), command=_accept_command(answer, item_id))
        for text, item_id in zip(answer.texts, item_ids)])


def completion_items(answer: Answer, item_ids: list[int]) -> types.CompletionList:
    """For clients without inline completion: an item per candidate, marked as AI.
    Incomplete, so that the client asks again as the user types."""
    items = []
    for rank, (text, item_id) in enumerate(zip(answer.texts, item_ids)):
        first_line = text.strip().split("\n", 1)[0]
        items.append(types.CompletionItem(
            label=first_line[:60] or text[:60],
            label_details=types.CompletionItemLabelDetails(description="AI · completer"),
            kind=types.CompletionItemKind.Snippet,
            detail="AI completion (completer)",
            documentation=types.MarkupContent(types.MarkupKind.PlainText, text),
            text_edit=types.TextEdit(types.Range(answer.position, answer.position), answer.document.leaving(text)),
            insert_text_format=types.InsertTextFormat.PlainText,
            sort_text=str(rank),
            command=_accept_command(answer, item_id),
        ))
    return types.CompletionList(is_incomplete=True, items=items)

"""Completions for documents being edited, the same for every backend, over one Decoder
(decoders.local.LocalDecoder: this machine's engine; decoders.server.ServerDecoder:
llama-server or an OpenAI-compatible server). The Completer is a facade over its parts:

    documents.py  one object per document: its session, forward cache, recent edits and
                  running requests (newest request wins); a close is one removal
    inline.py     inline completions: forward cache -> prefetch -> the prompt fitted to
                  the decoder's context, decoded, post-processed; warming; the prefetch
    editing.py    next edits: the region around the cursor written again, as edits
    serving.py    what the parts share: entering a document under the decoder's turn,
                  and a decoder's failures as answers (superseded, no room, server down)
    counters.py   the counters behind `completer/stats`
"""

import threading
from contextlib import AbstractContextManager

from completer.config import Config
from completer.decoders.protocol import Decoder, DecoderModel
from completer.editor.context import ChunkRing
from completer.editor.counters import Counters
from completer.editor.documents import EDIT, INLINE, WARM, Documents, stopped_by_close
from completer.editor.editing import NextEdits, edit_format_name
from completer.editor.inline import InlineCompletions
from completer.editor.serving import Serving
from completer.requests import CancelFlag, CompleterStats, Completion, CompletionRequest, NextEdit, Source
from completer.workspace import Workspace

__all__ = ["Completer", "edit_format_name"]  # edit_format_name: the edit bench imports it from here


class Completer:
    """Completions for every document, from one decoder; the newest request of a kind for
    a document wins. Thread-safe: the language server calls it from worker threads."""

    def __init__(self, decoder: Decoder, config: Config | None = None, workspace: Workspace | None = None):
        workspace = workspace or Workspace([])
        self.decoder = decoder
        self.documents = Documents()
        self.counters = Counters()
        self.ring = ChunkRing(workspace, decoder.count)
        self.serving = Serving(decoder, workspace, Config(), self.documents, self.counters, self.ring)
        self.inline = InlineCompletions(self.serving)
        self.edits = NextEdits(self.serving)
        self.configure(config or Config())

    @property
    def config(self) -> Config:
        return self.serving.config

    @property
    def workspace(self) -> Workspace:
        return self.serving.workspace

    def configure(self, config: Config) -> None:
        """New options: each request takes the options in force when it starts (the
        models stay); a new index size applies from the next index_workspace()."""
        self.serving.config = config
        self.inline.prefetches.drop(lambda ahead: True)  # computed under the old options
        self.ring.resize(config.prompt.chunks, config.prompt.chunk_lines)
        self.decoder.configure(config)

    def request(self, document: str, kind: str = INLINE) -> AbstractContextManager[CancelFlag]:
        """A request of `kind` (documents.INLINE, EDIT, WARM) for the document, running for
        the block's length: older ones of its kind are cancelled, and the flag given to
        complete(), next_edit() or warm() stops it. Its caller owns it: the language server
        starts it before the debounce."""
        return self.documents.running(document, kind)

    def close(self, document: str) -> None:
        """The editor closed the document: its requests stop and its state goes (one
        removal), with a prefetch for it and the decoder's caches of it. Never waits, so the
        server runs it on its event loop, in the order of the editor's messages: a request
        or a reopen after the close finds the document closed, and the decoder releases the
        caches before anyone uses its engine again. Work that starts after this for a
        request made before it stops by the flag the request carries (CompletionRequest.closed)."""
        closed = self.documents.close(document)
        self.inline.prefetches.drop(lambda ahead: ahead.request.document == document)
        self.decoder.close(document, closed.path if closed is not None else None)

    def forget_shown(self, document: str) -> None:
        """Forget the completion last shown in the document: the next request decodes."""
        self.documents.forget_shown(document)

    def document_changed(self, document: str, text: str) -> None:
        """The editor changed a document: a prefetch for it that the change does not lead to
        (the user typed something else than the shown completion) stops."""
        self.inline.prefetches.drop(lambda ahead: ahead.request.document == document and not ahead.on_the_way(text))

    def file_saved(self, path: str, text: str) -> None:
        """The editor saved a file: inside the workspace, the decoder drafts from this text of it."""
        if self.workspace.contains(path):
            self.decoder.file_saved(path, text)

    def index_workspace(self) -> threading.Thread | None:
        """Start the decoder's index of the workspace (drafting from its files), if it keeps one."""
        return self.decoder.index_workspace(self.workspace)

    def stop_indexing(self) -> None:
        self.decoder.stop_indexing()

    def reset(self) -> None:
        """Forget every document's session, forward cache and the decoder's caches, as if just loaded."""
        self.inline.prefetches.drop(lambda ahead: True)
        self.documents.reset()
        self.decoder.reset()

    def stats(self) -> CompleterStats:
        return self.counters.stats(sessions=self.documents.sessions(), **self.decoder.statistics())

    def prompt_text(self, prompt: list[int] | str) -> str:
        """A completion's prompt as the model saw it, control tokens spelt out."""
        return self.decoder.prompt_text(prompt)

    def prompt(self, request: CompletionRequest, model: DecoderModel) -> tuple[list[int] | str, int, str]:
        """The request's inline prompt, its length and the suffix the cursor sees (the bench's)."""
        return self.inline.prompt(request, model)

    def complete(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> Completion:
        """The completion at the request's cursor. `cancel`: request()'s, whose caller owns
        the request (else it runs for this call); once set, the answer is empty (Source.SUPERSEDED)."""
        request.check_cursor()
        with self.documents.owned(request.document, INLINE, cancel) as cancel, stopped_by_close(request, cancel):
            completion = self.inline.complete(request, cancel)
        self.counters.count(superseded=completion.source == Source.SUPERSEDED)
        completion.warning = completion.warning or self.decoder.warning
        return completion

    def next_edit(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> NextEdit:
        """The edits the user will make next in the editable region around the cursor: the
        model writes the region again (copy drafting from it where the decoder has it),
        and the answer is the difference. A newer next-edit request for the document
        cancels this one (request(document, EDIT)); inline requests do not."""
        request.check_cursor()
        self.inline.prefetches.drop(lambda ahead: not ahead.done.is_set())  # a running one would hold up this request
        with self.documents.owned(request.document, EDIT, cancel) as cancel, stopped_by_close(request, cancel):
            edit = self.edits.next_edit(request, cancel)
        edit.warning = edit.warning or self.decoder.warning
        return edit

    def warm(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> int:
        """Evaluate the prompt a request at this cursor would have, before it is asked (a
        document opened or made active, the user reading before typing), as llama.vim
        pre-sends its prompt with n_predict 0; the prompt tokens evaluated. `cancel`:
        request(document, WARM)'s, taken where the editor's messages are read in order, so
        that a close read after it stops it."""
        request.check_cursor()
        with self.documents.owned(request.document, WARM, cancel) as cancel, stopped_by_close(request, cancel):
            return self.inline.warm(request, cancel)

    def prefetch(self, request: CompletionRequest, start: int) -> Completion | None:
        """Compute the completion at `request` now, for complete() to answer that request
        with: `request` is the document as accepting a shown completion (request.text[start
        : request.cursor]) leaves it. Only while no request is running: one the user waits
        for goes first, and any that comes stops it at its next round. The same prefetch
        already there is kept; another is replaced. Returns what it computed; None when it
        did not start."""
        request.check_cursor()
        return self.inline.prefetch(request, start)

"""Completions for documents being edited, the same for every decoder (LocalDecoder: this
machine's engine; ServerDecoder: a team server). The Completer is a facade over its parts:

    documents.py  one object per document: its session, forward cache, recent edits and
                  running requests (newest request wins); a close is one removal
    inline.py     inline completions: forward cache -> prefetch -> the prompt fitted to
                  the decoder's context, decoded, post-processed; warming; the prefetch
    editing.py    next edits: the region around the cursor written again, as edits
    serving.py    what the parts share: entering a document under the decoder's turn,
                  and a decoder's failures as answers (superseded, no room, server down)
    repository_context.py  the definitions index: other files' definitions in prompts
    counters.py, load.py  the counters behind `completer/stats`; a shared server's load

Each request crosses to the decoder once (decoders/decoder.py: decode or warm); the
decoder calls the request's prompt back under its turn, with its model's tokenizer.
"""

import threading
from contextlib import AbstractContextManager

from completer.config import Config
from completer.decoders.decoder import Closed, Decoder, Saved
from completer.editor.context import ChunkRing
from completer.editor.counters import Counters
from completer.editor.documents import EDIT, INLINE, WARM, Documents, stopped_by_close
from completer.editor.editing import NextEdits
from completer.editor.inline import InlineCompletions
from completer.editor.repository_context import RepositoryContext
from completer.editor.serving import Serving
from completer.errors import Unavailable
from completer.requests import CancelFlag, CompleterStats, Completion, CompletionRequest, NextEdit, Source
from completer.workspace import Workspace


class Completer:
    """Completions for every document, from one decoder; the newest request of a kind for
    a document wins. Thread-safe: the language server calls it from worker threads."""

    def __init__(self, decoder: Decoder, config: Config | None = None, workspace: Workspace | None = None):
        workspace = workspace or Workspace([])
        self.decoder = decoder
        self.documents = Documents()
        self.counters = Counters()
        self.ring = ChunkRing(workspace)  # chunks measured in the model's tokens as a request adds them
        self.repository = RepositoryContext(workspace)  # the definitions index
        self.serving = Serving(decoder, workspace, Config(), self.documents, self.counters, self.ring,
                               self.repository)
        self.inline = InlineCompletions(self.serving)
        self.edits = NextEdits(self.serving)
        self.configure(config or Config())

    @property
    def config(self) -> Config:
        return self.serving.config

    def configure(self, config: Config) -> None:
        """New options: each request takes the options in force when it starts (the
        models stay); a new index size applies from the next index_workspace()."""
        self.serving.config = config
        self.inline.prefetches.drop(lambda ahead: True)  # computed under the old options
        self.ring.resize(config.prompt.chunks, config.prompt.chunk_lines, config.context.exclude_patterns)
        self.repository.configure(config.context)
        self.decoder.configure(config)

    def request(self, document: str, kind: str = INLINE) -> AbstractContextManager[CancelFlag]:
        """A request of `kind` (INLINE, EDIT, WARM) for the block's length, cancelling the older one of its
        kind; its flag goes to complete(), next_edit() or warm() (the server starts it before the debounce)."""
        return self.documents.running(document, kind)

    def close(self, document: str) -> None:
        """Its requests stop, its state goes (one removal), its prefetch and the decoder's caches of it.
        Never waits (the event loop runs it); later work for it stops by CompletionRequest.closed."""
        closed = self.documents.close(document)
        self.inline.prefetches.drop(lambda ahead: ahead.request.document == document)
        self.decoder.document_event(Closed(document, closed.path if closed is not None else None))

    def document_changed(self, document: str, text: str) -> None:
        """A prefetch for the document stops unless the change leads to it (the shown completion typed)."""
        self.inline.prefetches.drop(lambda ahead: ahead.request.document == document and not ahead.on_the_way(text))

    def file_saved(self, path: str, text: str) -> None:
        """Inside the workspace, not excluded: the decoder drafts from this text, the definitions index reads it."""
        if self.serving.workspace.contains(path) and not self.repository.excluded(path):
            self.decoder.document_event(Saved(path, text))
            self.repository.file_changed(path, text)

    def index_workspace(self) -> list[threading.Thread]:
        """Start the decoder's index of the workspace (drafting), if it keeps one, and the definitions index."""
        return [thread for thread in (self.decoder.index_workspace(self.serving.workspace), self.repository.start())
                if thread is not None]

    def stop_indexing(self) -> None:
        self.decoder.stop_indexing()
        self.repository.stop()

    def reset(self) -> None:
        """Forget every document's session, forward cache and the decoder's caches, as if just loaded."""
        self.inline.prefetches.drop(lambda ahead: True)
        self.documents.reset()
        self.decoder.reset()

    def stats(self) -> CompleterStats:
        return self.counters.stats(sessions=self.documents.sessions(), **self.repository.statistics(),
                                   **self.serving.load.statistics(), **self.decoder.statistics())

    def debounce_ms(self) -> float:
        """lsp.debounce_ms; with lsp.back_off, longer while a shared server answers slowly (load.py)."""
        return self.serving.load.debounce_ms(self.config.lsp.debounce_ms) if self.config.lsp.back_off else \
            self.config.lsp.debounce_ms

    def prompt_text(self, prompt: list[int] | str) -> str:
        """A completion's prompt as the model saw it, control tokens spelt out."""
        if (model := self.decoder.connect()) is None:
            raise Unavailable(self.decoder.warning)
        return model.text_of(prompt)

    def complete(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> Completion:
        """The completion at the request's cursor. `cancel`: request()'s (else the request runs
        for this call); once set, the answer is empty (Source.SUPERSEDED)."""
        request.check_cursor()
        with self.documents.owned(request.document, INLINE, cancel) as cancel, stopped_by_close(request, cancel):
            completion = self.inline.complete(request, cancel)
        self.counters.count(superseded=completion.source == Source.SUPERSEDED)
        completion.warning = completion.warning or self.decoder.warning
        return completion

    def next_edit(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> NextEdit:
        """The edits the user will make next in the region around the cursor: the model writes
        the region again, the answer is the difference. A newer next edit cancels this one."""
        request.check_cursor()
        self.inline.prefetches.drop(lambda ahead: not ahead.done.is_set())  # a running one would hold up this request
        with self.documents.owned(request.document, EDIT, cancel) as cancel, stopped_by_close(request, cancel):
            edit = self.edits.next_edit(request, cancel)
        edit.warning = edit.warning or self.decoder.warning
        return edit

    def warm(self, request: CompletionRequest, cancel: CancelFlag | None = None) -> int:
        """Evaluate ahead the prompt a request at this cursor would have (a document opened or made
        active; llama.vim's n_predict 0); the tokens evaluated. `cancel`: request(document, WARM)'s."""
        request.check_cursor()
        with self.documents.owned(request.document, WARM, cancel) as cancel, stopped_by_close(request, cancel):
            return self.inline.warm(request, cancel)

    def prefetch(self, request: CompletionRequest, start: int) -> Completion | None:
        """Compute now complete()'s answer to `request`, the document as accepting a shown completion
        (request.text[start : request.cursor]) leaves it; only while no request runs (any that comes
        stops it). What it computed; None when it did not start."""
        request.check_cursor()
        return self.inline.prefetch(request, start)

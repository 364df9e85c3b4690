"""The repository's part of an inline prompt: the definitions, in other files of the
workspace, that a completion at the cursor likely calls (definitions_context.py chooses
them), shown as context files before the open files' chunks.

    start()            the index built on a worker thread (DefinitionsIndex.build: the
                       workspace index's walker, its rules, context.exclude)
    file_changed()     a file saved, or a document the user left: its outline replaced
    select(request)    the snippets for a request within context.definitions_tokens

The same snippets go to every decoder: the prompt is made on the editor side. Their
tokens are counted with the request's model (a server's /tokenize), once per snippet
text: a keystroke that finds the same definitions counts nothing again.
"""

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from completer.config import ContextOptions
from completer.editor.definitions_context import Snippet, fit, ranked
from completer.engine.definitions import Import, extract
from completer.engine.definitions_index import DefinitionsIndex, is_excluded
from completer.requests import CompletionRequest
from completer.workspace import Workspace

COUNTED_MOST = 4096  # snippet texts whose token counts are kept


class RepositoryContext:
    """The definitions index of the workspace and what a request's prompt takes from it."""

    def __init__(self, workspace: Workspace):
        self.workspace = workspace
        self.options = ContextOptions()
        self.index = DefinitionsIndex(workspace, self.options.exclude_patterns, self.most_bytes(self.options))
        self._counted: dict[str, int] = {}  # snippet text -> its tokens
        # An open document's path -> (its text but the cursor's line, its imports).
        self._imports: dict[str, tuple[str, tuple[Import, ...]]] = {}
        self._stop = threading.Event()

    @staticmethod
    def most_bytes(options: ContextOptions) -> int:
        return int(options.definitions_mb * 2**20)

    def configure(self, options: ContextOptions) -> None:
        """New options: the exclusions and the memory bound apply to the next file read."""
        self.options = options
        self.index.exclude = options.exclude_patterns
        self.index.most_bytes = self.most_bytes(options)

    def excluded(self, path: str) -> bool:
        """Whether context.exclude keeps the file (inside the workspace) out of every prompt."""
        return self.workspace.contains(path) and is_excluded(self.workspace.relative(path), self.options.exclude_patterns)

    def build(self, within_s: float = math.inf) -> bool:
        """Build the index now, a blocking call (the command line's, the bench's), for at
        most `within_s` seconds (the most recently modified files come first); stop() ends
        it. Whether it read every file."""
        if not (self.workspace.roots and self.options.definitions_tokens):
            return True
        deadline = time.monotonic() + within_s
        cut: list[bool] = []

        def cancelled() -> bool:
            if time.monotonic() > deadline:
                cut.append(True)
            return bool(cut) or self._stop.is_set()

        self.index.build(cancelled=cancelled)
        return not cut

    def start(self) -> threading.Thread | None:
        """Build the index on a worker thread; None when there is nothing to index."""
        if not self.workspace.roots or not self.options.definitions_tokens:
            return None
        self._stop.clear()
        thread = threading.Thread(target=self.build, name="definitions index", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    def file_changed(self, path: str, text: str) -> None:
        """The editor's text of a workspace file (saved, or a document the user left)."""
        if self.options.definitions_tokens and self.workspace.contains(path):
            self.index.update(path, text)

    def select(self, request: CompletionRequest, count_tokens: Callable[[str], int]) -> list[Snippet]:
        """The snippets for the request's prompt, in file and line order, within
        context.definitions_tokens counted by `count_tokens` (the request's model)."""
        budget = self.options.definitions_tokens
        if not budget or not self.index.files or not self.workspace.contains(request.path):
            return []
        before = request.text[: request.cursor]
        found = ranked(request.path, before, self.imports(request),
                       lambda name: self.index.lookup(name, outside=request.path), request.language or None)
        return fit(found, lambda text: self.count(text, count_tokens), budget, self.workspace.relative)

    def imports(self, request: CompletionRequest) -> tuple[Import, ...]:
        """The document's imports, as its text says them now: the file is parsed again
        only when a line other than the cursor's changed (typing within a line reuses them)."""
        line_start = request.text.rfind("\n", 0, request.cursor) + 1
        line_end = request.text.find("\n", request.cursor)
        others = request.text[:line_start] + (request.text[line_end:] if line_end >= 0 else "")
        kept = self._imports.get(request.path)
        if kept is not None and kept[0] == others:
            return kept[1]
        imports = extract(request.path, request.text, request.language or None).imports
        self._imports[request.path] = (others, imports)
        return imports

    def count(self, text: str, count_tokens: Callable[[str], int]) -> int:
        """A snippet's tokens, counted once: the models stay for the Completer's life."""
        tokens = self._counted.get(text)
        if tokens is None:
            tokens = count_tokens(text)
            if len(self._counted) >= COUNTED_MOST:
                self._counted.clear()
            self._counted[text] = tokens
        return tokens

    def statistics(self) -> dict:
        """The index's part of CompleterStats, by field."""
        stats = self.index.stats()
        return {"definitions_files": stats.files, "definitions": stats.definitions,
                "definitions_mb": round(stats.bytes / 2**20, 1), "definitions_build_ms": round(stats.build_ms)}

    def forget(self, path: str) -> None:
        self._imports.pop(path, None)

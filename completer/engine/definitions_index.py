"""The definitions index: every definition in the workspace's source files, by name, for
the prompt to show the ones a completion calls (completer.editor.definitions_context).

    build(files)        the workspace index's files (workspace_index.workspace_files: the
                        same walker, the same rules), each read and outlined
                        (completer.engine.definitions), until the memory bound is reached
    update(path, text)  a file saved or changed in the editor: its outline replaced
    remove(path)        a file deleted
    lookup(name)        the definitions of that name, outside a given file

Privacy: a file is read only inside a workspace folder (symlinks and ".." resolved), and
never when its path matches an exclusion pattern (`is_excluded`: context.exclude, by default
DEFAULT_EXCLUDE: keys, certificates, .env files, credentials): the check comes before the
file is opened, and the editor's copy of such a file is not outlined either.

Memory: each definition is counted as its strings' characters and DEFINITION_BYTES more (a
measured upper figure for the object, its strings' headers and its slot in the name table);
a file that would take the total past `most_bytes` is kept without its definitions' texts
(signatures and docstrings only), and left out when even that does not fit.

Thread safety: a build runs on a worker thread while the editor's saves arrive on another;
one lock guards the tables. A file the editor has sent is not read again from disk by a
build still running: the editor's text is newer.
"""

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from completer.config import DEFAULT_EXCLUDE
from completer.engine.definitions import Definition, Import, Outline, extract
from completer.engine.workspace_index import workspace_files
from completer.models.sources import MAX_BYTES, is_excluded
from completer.workspace import Workspace

# The bound on the index's memory. Counted: a generated 5,000-file workspace (70,000 short
# definitions) 43 MB; the Python standard library (1,556 files, 69,508 definitions) 52 MB.
DEFAULT_MOST_BYTES = 64 * 2**20
# Bytes a definition takes besides its strings' characters: the object (9 slots), its
# strings' headers and its slot in the name table. Measured by tracemalloc over a generated
# 5,000-file workspace (tests/unit/test_definitions.py): 557 bytes a definition in all, of
# which 206 characters, so 351 besides; rounded up.
DEFINITION_BYTES = 400


@dataclass(frozen=True)
class FileEntry:
    outline: Outline
    size: int  # bytes counted against the bound
    edited: bool  # the editor's text, newer than the disk's


@dataclass(frozen=True)
class IndexStats:
    files: int
    definitions: int
    bytes: int  # counted against the bound (an estimate of what the tables hold)
    build_ms: float  # the last build's wall time
    left_out: int  # files over the memory bound: not indexed


def outline_size(outline: Outline) -> int:
    return sum(DEFINITION_BYTES + len(d.name) + len(d.kind) + len(d.signature) + len(d.doc) + len(d.path)
               + len(d.container) + len(d.text) for d in outline.definitions) + 64 * len(outline.imports)


def without_texts(outline: Outline) -> Outline:
    return replace(outline, definitions=tuple(replace(d, text="") for d in outline.definitions))


class DefinitionsIndex:
    """The definitions of the workspace's files, by name, within a memory bound."""

    def __init__(self, workspace: Workspace, exclude: Iterable[str] = DEFAULT_EXCLUDE,
                 most_bytes: int = DEFAULT_MOST_BYTES):
        self.workspace = workspace
        self.exclude = tuple(exclude)
        self.most_bytes = most_bytes
        self.files: dict[str, FileEntry] = {}  # resolved path -> its entry
        self.by_name: dict[str, list[Definition]] = {}
        self.held = 0  # bytes counted, of all entries
        self.left_out: set[str] = set()
        self.build_ms = 0.0
        self.lock = threading.Lock()

    def allowed(self, path: str | Path) -> bool:
        """Inside a workspace folder and not excluded (by its resolved path: a link named
        anything to a .env file is the .env file)."""
        return self.workspace.contains(path) and not is_excluded(self.workspace.relative(path), self.exclude)

    def build(self, files: Iterable[Path] | None = None, cancelled: Callable[[], bool] = lambda: False) -> IndexStats:
        """Outline the files (the workspace index's, when None given): a blocking call, for
        a worker thread. Stops at its next file when `cancelled()`."""
        start = time.perf_counter()
        for path in workspace_files(self.workspace, exclude=self.exclude) if files is None else files:
            if cancelled():
                break
            key = str(Path(path).resolve())
            with self.lock:
                if key in self.files and self.files[key].edited:
                    continue
            text = self.read(key)
            if text is not None:
                self.store(key, extract(key, text), edited=False)
        self.build_ms = (time.perf_counter() - start) * 1000  # ms
        return self.stats()

    def read(self, path: str) -> str | None:
        """The file's text; None when it may not be read, is gone, or is over MAX_BYTES."""
        if not self.allowed(path):
            return None
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_BYTES + 1)
        except OSError:
            return None
        return data.decode("utf-8", "replace") if len(data) <= MAX_BYTES else None

    def update(self, path: str | Path, text: str, language: str | None = None) -> bool:
        """The editor's text of a file (saved or changed): outlined in place of what the
        index held. False, and nothing held of it, for a file that may not be read."""
        key = str(Path(path).resolve())
        if not self.allowed(key) or len(text) > MAX_BYTES:
            self.remove(key)
            return False
        return self.store(key, extract(key, text, language), edited=True)

    def remove(self, path: str | Path) -> None:
        key = str(Path(path).resolve())
        with self.lock:
            self.drop(key)
            self.left_out.discard(key)

    def store(self, key: str, outline: Outline, edited: bool) -> bool:
        size = outline_size(outline)
        with self.lock:
            if not edited and key in self.files and self.files[key].edited:
                return False  # the editor sent a newer text while the build read the disk's
            self.drop(key)
            if self.held + size > self.most_bytes:
                outline = without_texts(outline)
                size = outline_size(outline)
            if self.held + size > self.most_bytes:
                self.left_out.add(key)
                return False
            self.left_out.discard(key)
            self.files[key] = FileEntry(outline, size, edited)
            self.held += size
            for definition in outline.definitions:
                self.by_name.setdefault(definition.name, []).append(definition)
            return True

    def drop(self, key: str) -> None:
        """Forget a file's entry (the lock held)."""
        entry = self.files.pop(key, None)
        if entry is None:
            return
        self.held -= entry.size
        for name in {definition.name for definition in entry.outline.definitions}:
            kept = [definition for definition in self.by_name.get(name, []) if definition.path != key]
            if kept:
                self.by_name[name] = kept
            else:
                self.by_name.pop(name, None)

    def lookup(self, name: str, outside: str | Path = "") -> list[Definition]:
        """The definitions named `name`, in files other than `outside`, by file and line."""
        skipped = str(Path(outside).resolve()) if outside else ""
        with self.lock:
            found = [definition for definition in self.by_name.get(name, ()) if definition.path != skipped]
        return sorted(found, key=lambda definition: (definition.path, definition.start_line))

    def imports_of(self, path: str | Path) -> tuple[Import, ...]:
        with self.lock:
            entry = self.files.get(str(Path(path).resolve()))
        return entry.outline.imports if entry is not None else ()

    def stats(self) -> IndexStats:
        with self.lock:
            definitions = sum(len(entry.outline.definitions) for entry in self.files.values())
            return IndexStats(len(self.files), definitions, self.held, self.build_ms, len(self.left_out))

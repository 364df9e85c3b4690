"""Context from other files: a ring of chunks, as llama.vim's, limited to the workspace.

A chunk is some lines of another open document, taken around where its cursor last
was when the user left it: the code being worked on is what the next completion most
likely uses. The ring keeps the newest chunks; a chunk nearly equal to a newer one is
dropped, so that flipping between two places does not fill the ring with copies. The
prompt takes the newest chunks that fit a token budget, in ring order (oldest first),
so that a new chunk changes only the end of the context block.

Only documents whose path lies inside a workspace folder, and matches no context.exclude
pattern, become chunks: a file opened from elsewhere (a system header, another project's
secrets) or an open .env file never reaches a prompt. No file is read from disk: chunks
come from what the editor sent.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass

from completer.config import DEFAULT_EXCLUDE
from completer.models.sources import is_excluded
from completer.prompt import ContextFile, editor_lines
from completer.workspace import Workspace

# Lines shared (of the larger chunk) above which two chunks count as the same place.
SIMILAR = 0.9
CHUNK_WHY = "an open file: the lines around where its cursor last was"  # ContextFile.why


@dataclass(frozen=True)
class Chunk:
    path: str
    text: str
    tokens: int


def chunk_around(text: str, cursor: int, lines: int) -> str:
    """`lines` lines of `text` centred on the cursor's line, fewer near the ends."""
    all_lines = editor_lines(text)
    line = text.count("\n", 0, cursor)
    start = max(0, min(line - lines // 2, len(all_lines) - lines))
    return "".join(all_lines[start : start + lines])


def similarity(a: str, b: str) -> float:
    """Lines the two texts share, as a fraction of the longer one's lines."""
    lines_a, lines_b = a.splitlines(), b.splitlines()
    if not lines_a or not lines_b:
        return 0.0
    shared = len(set(lines_a) & set(lines_b))
    return shared / max(len(set(lines_a)), len(set(lines_b)))


class ChunkRing:
    """The chunks, as requests on several worker threads share them: one change or
    selection at a time (an add builds the ring's new list from the old one, so two at
    once would lose one's chunk, and a select would read a list being cut)."""

    def __init__(self, workspace: Workspace, count_tokens: Callable[[str], int] = len, capacity: int = 16,
                 chunk_lines: int = 64, exclude: tuple[str, ...] = DEFAULT_EXCLUDE):
        self.workspace = workspace
        self.count_tokens = count_tokens
        self.capacity = capacity
        self.chunk_lines = chunk_lines
        self.exclude = exclude  # patterns of paths never taken (context.exclude)
        self.chunks: list[Chunk] = []  # oldest first
        self._lock = threading.Lock()

    def resize(self, capacity: int, chunk_lines: int, exclude: tuple[str, ...] = DEFAULT_EXCLUDE) -> None:
        """New options; chunks of paths `exclude` now names go."""
        with self._lock:
            self.capacity, self.chunk_lines, self.exclude = capacity, chunk_lines, exclude
            self.chunks = [chunk for chunk in self.chunks if not is_excluded(chunk.path, exclude)]
            del self.chunks[: max(0, len(self.chunks) - self.capacity)]

    def add(self, path: str, text: str, cursor: int, count_tokens: Callable[[str], int] | None = None) -> bool:
        """Take a chunk of `path`'s `text` around the cursor's line; False when the path is
        outside the workspace or excluded, or the chunk holds too little code to help. Its
        tokens are counted with `count_tokens` (a server's /tokenize under the request's
        cancel flag), by default the ring's own, outside the lock."""
        if not self.workspace.contains(path) or is_excluded(self.workspace.relative(path), self.exclude):
            return False
        chunk_text = chunk_around(text, cursor, self.chunk_lines)
        if sum(1 for line_text in chunk_text.splitlines() if line_text.strip()) < 3:
            return False
        chunk = Chunk(self.workspace.relative(path), chunk_text, (count_tokens or self.count_tokens)(chunk_text))
        with self._lock:
            self.chunks = [c for c in self.chunks if similarity(c.text, chunk_text) < SIMILAR]
            self.chunks.append(chunk)
            del self.chunks[: max(0, len(self.chunks) - self.capacity)]
        return True

    def select(self, budget_tokens: int, exclude: str = "") -> tuple[ContextFile, ...]:
        """The newest chunks (not of `exclude`, the path being completed) that fit
        `budget_tokens`, oldest first."""
        with self._lock:
            chunks = list(self.chunks)
        chosen: list[Chunk] = []
        used = 0
        for chunk in reversed(chunks):
            if chunk.path == exclude or used + chunk.tokens > budget_tokens:
                continue
            chosen.append(chunk)
            used += chunk.tokens
        return tuple(ContextFile(c.path, c.text, CHUNK_WHY) for c in reversed(chosen))

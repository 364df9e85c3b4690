"""The workspace index: every source file in the workspace folders, as tokens, for
n-gram lookup to draft from. Code repeats across files (imports, call signatures,
the same idioms), so the text after a cursor has often been written elsewhere.

    build (a background thread, at start-up)
        files    = the workspace folders' source files (those .gitignore does not exclude,
                   read without running git, less dependency and build folders and
                   generated, binary, empty and huge files and those context.exclude names,
                   which are never opened; never through a symlink, never outside a
                   folder; the first MOST_FILES listed), most recently modified
                   first, until the token budget (drafting.index_mb less the saved files'
                   share, SAVED_FILES_SHARE) is spent
        tokens   = all of them, one array, a separator between files
        order    = every position, sorted by the tokens before it read backwards (the
                   first 8 of them): a suffix array of the reversed text, cut at that depth
    lookup(text)
        binary search for the text's end read backwards -> the longest match (extended
        past the sort's depth over the candidates that got that far) ->
        the continuation most of those candidates share, token by token, and where they
        split, the runner-up's continuation (a branch for a token tree)
    hide(path)  the editor has a newer text of the file (open, or saved since): the
                table's copy is skipped, and the newer text is drafted from on its own
                (completer.engine.drafts)

The tokens are kept between runs (saved_index_path: keyed on the model file's size and
modification time, so a GGUF replaced in place starts afresh): a file unchanged since is
not tokenized again, which is most of a build's time (docs/speculative-decoding.md, "The
workspace index"). A saved index that does not read back is removed.

A build never dies of one file (gone since it was listed, unreadable, not text: skipped),
logs one that failed, stops at its next file when cancelled (a reload: it holds the old
model's tokenizer until then), and waits for any other build to end first: one runs at
a time. Proposals are cut at the first token the model's vocabulary lacks.

Memory: 8 bytes a token (the token and its place in `order`); the build briefly needs
about 6 times that for its sort keys (399 MB more for the standard library's 68 MB).
"""

import contextlib
import hashlib
import logging
import os
import threading
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from completer.config import DEFAULT_EXCLUDE, DraftingOptions
from completer.models.atomic import write_atomically
from completer.models.paths import cache_dir
from completer.models.sources import source_files
from completer.prompt import LINE_COMMENT
from completer.workspace import Workspace

log = logging.getLogger(__name__)

SEPARATOR = -1  # between files: no match crosses it, and it sorts before every token
# The sort orders positions by the tokens before them packed into this many 64-bit words:
# 8 tokens of a vocabulary under 65,536 (smol's 49,152), 6 of one under 2^21 (Qwen's
# 151,646). A match that long is extended over its candidates (MAX_CANDIDATES of them) at
# once; a third key made the sort nearly twice as long (measured:
# docs/speculative-decoding.md, "Measurements behind the engine's constants").
SORT_WORDS = 2
PADDING = 16  # separators before the first file: every position has its sort depth of tokens before it
# Candidates extended past the sort's depth, and voted on for the continuation: enough to
# tell a common idiom from a one-off, few enough that a lookup stays under a millisecond.
MAX_CANDIDATES = 256
BRANCH_MOST = 16  # tokens of a token-tree branch proposed: the tuner takes as many of them as pay
BYTES_PER_TOKEN = 8  # int32 token + int32 place in the sorted order
# Files listed per build at most: listing stats every file, and a workspace folder that is
# a home directory or a monorepo would take minutes of it before the first token (the
# standard library has 1,556 source files, Linux's kernel about 60,000 .c and .h).
MOST_FILES = 100_000
# The smallest file the indexes read: any but an empty one. A 300-byte constants.py or a
# small dataclass holds the definitions a prompt needs (sources.MIN_BYTES is for the bench's
# holes, which want a file with some code to cut).
INDEXED_MIN_BYTES = 1
# Bytes of source read per build at most, per byte of drafting.index_mb: code takes 3-4
# bytes a token and a token 8 bytes of index, so ordinary code spends the token budget
# first; this bounds text that makes few tokens of many bytes (long runs of one character).
SOURCE_BYTES_PER_INDEX_BYTE = 1
# Share of drafting.index_mb kept for the indexes of the files saved since the build
# (completer.engine.drafts), so that both together stay within it: a file being edited is
# the likeliest to be copied from, and its saved text is newer than the table's copy.
SAVED_FILES_SHARE = 1 / 8
SAVED_FORMAT = 1  # of the saved index (its layout: PADDING, SORT_WORDS): another one is not read


class Match(NamedTuple):
    tokens: list[int]  # the continuation proposed
    length: int  # tokens of the text's end matched
    # Where the occurrences still agreeing with the proposal went on differently: step ->
    # what the runner-up there went on with, from its token at that step (a branch a
    # token tree can verify beside the proposal).
    branches: dict[int, list[int]] = {}


NO_MATCH = Match([], 0)


class TokenTable:
    """Files' tokens, concatenated, and their positions sorted by reversed context.
    Immutable once built: lookups need no lock."""

    def __init__(self, files: list[tuple[str, np.ndarray]], order: np.ndarray | None = None):
        """`order`: the sorted positions of an earlier table of exactly these files."""
        pieces = [np.full(PADDING, SEPARATOR, np.int32)]
        self.paths: list[str] = []
        self.file_numbers: dict[str, int] = {}  # path -> its index in paths
        starts = []
        offset = PADDING
        for path, tokens in files:
            self.file_numbers[path] = len(self.paths)
            self.paths.append(path)
            starts.append(offset)
            pieces += [tokens.astype(np.int32), np.array([SEPARATOR], np.int32)]
            offset += len(tokens) + 1
        self.tokens = np.concatenate(pieces)  # [n]
        self.starts = np.array(starts, np.int64)  # [files]
        self.bits = int(self.tokens.max(initial=0) + 2).bit_length()  # a token + 1 in a sort key
        self.depth = min(SORT_WORDS * (64 // self.bits), PADDING)  # the tokens before a position it is sorted by
        self.order = self._sorted_positions() if order is None else order  # [positions]
        # Where each token's block of `order` starts (the positions it comes just before):
        # a lookup's binary search begins inside its last token's block.
        before = self.tokens[self.order.astype(np.int64) - 1]
        self.blocks = np.searchsorted(before, np.arange(int(self.tokens.max(initial=0)) + 2))  # [max token + 2]

    def _sorted_positions(self) -> np.ndarray:
        """Positions p with a token at p, sorted by tokens[p-1], tokens[p-2], ... (the first
        `depth` of them), packed a few tokens to a 64-bit word (token + 1; the separator 0)."""
        tokens = self.tokens
        index_type = np.int32 if len(tokens) < 2**31 else np.int64
        positions = np.flatnonzero(tokens != SEPARATOR).astype(index_type)
        if not len(positions):
            return positions
        per_word = 64 // self.bits
        words = []
        for first in range(1, self.depth + 1, per_word):
            word = np.zeros(len(positions), np.uint64)
            for back in range(first, min(first + per_word, self.depth + 1)):
                word <<= np.uint64(self.bits)
                word |= (tokens[positions - back] + 1).astype(np.uint64)
            words.append(word)
        return positions[np.lexsort(words[::-1])]  # lexsort's last key is its primary one

    @property
    def token_count(self) -> int:
        return len(self.tokens) - PADDING - len(self.paths)

    @property
    def nbytes(self) -> int:
        return self.tokens.nbytes + self.order.nbytes + self.starts.nbytes + self.blocks.nbytes

    def _context(self, index: int, depth: int) -> list[int]:
        """The `depth` tokens before order[index], nearest first."""
        position = int(self.order[index])
        return self.tokens[position - depth : position][::-1].tolist()

    def _bound(self, query: list[int], upper: bool, low: int, high: int) -> int:
        """The first index in [low, high) whose context (cut to len(query)) is >= query,
        or > it if `upper`."""
        depth = len(query)
        while low < high:
            middle = (low + high) // 2
            context = self._context(middle, depth)
            if context < query or (upper and context == query):
                low = middle + 1
            else:
                high = middle
        return low

    def candidates(self, suffix: list[int], min_match: int, max_match: int) -> tuple[int, np.ndarray]:
        """(the longest match of `suffix`'s end, at least `min_match` and at most
        `max_match` tokens; the positions just after its occurrences, at most
        MAX_CANDIDATES of them). (0, empty) when no occurrence matches `min_match`."""
        query = suffix[: -self.depth - 1 : -1]  # the end, nearest first
        if len(query) < min_match or not len(self.order) or query[0] + 1 >= len(self.blocks):
            return 0, np.empty(0, np.int64)
        low, high = int(self.blocks[query[0]]), int(self.blocks[query[0] + 1])
        at = self._bound(query, False, low, high)
        # The longest common prefix with the query is at one of the two neighbours.
        length = 0
        for index in (at - 1, at):
            if low <= index < high:
                context = self._context(index, len(query))
                length = max(length, next((i for i, (a, b) in enumerate(zip(context, query)) if a != b), len(query)))
        length = min(length, max_match)
        if length < min_match:
            return 0, np.empty(0, np.int64)
        prefix = query[:length]
        low, high = self._bound(prefix, False, low, at), self._bound(prefix, True, at, high)
        positions = self.order[low : min(high, low + MAX_CANDIDATES)].astype(np.int64)
        reach = min(max_match, len(suffix))
        if length == self.depth and reach > length:  # past the sort's depth, over the candidates at once
            back = np.arange(length + 1, reach + 1)  # [more]
            before = self.tokens[np.maximum(positions[:, None] - back, 0)]  # [n, more]; 0 is a separator
            held = before == np.asarray(suffix[-reach:][::-1][length:])
            extra = np.where(held.all(axis=1), len(back), held.argmin(axis=1))  # [n] tokens more each matched
            positions, length = positions[extra == extra.max()], length + int(extra.max())
        return length, positions

    def file_of(self, positions: np.ndarray) -> np.ndarray:
        """The index in `paths` of the file each position is in."""
        return np.searchsorted(self.starts, positions, side="right") - 1

    def continuation(self, positions: np.ndarray, k: int,
                     branches: int = 0) -> tuple[list[int], dict[int, list[int]]]:
        """Up to k tokens after `positions`, each the one most of the candidates still
        agreeing have next; and at the first `branches` steps where they disagreed, what
        the runner-up's candidates went on with (up to BRANCH_MOST tokens)."""
        proposed: list[int] = []
        forks: dict[int, list[int]] = {}
        for step in range(k):
            if len(positions) == 1:  # one candidate left: the rest of its file
                rest = self.tokens[positions[0] + step : positions[0] + k].tolist()
                proposed += rest[: rest.index(SEPARATOR)] if SEPARATOR in rest else rest
                break
            following = self.tokens[positions + step]
            if following[0] != SEPARATOR and (following == following[0]).all():
                best = int(following[0])  # all agree: no vote to count
            else:
                values, counts = np.unique(following[following != SEPARATOR], return_counts=True)
                if not len(values):
                    break
                ranked = values[np.argsort(-counts, kind="stable")].tolist()
                best = ranked[0]
                if len(ranked) > 1 and len(forks) < branches:
                    runner_up = positions[following == ranked[1]] + step + 1
                    forks[step] = [ranked[1], *self.continuation(runner_up, BRANCH_MOST - 1)[0]]
                positions = positions[following == best]
            proposed.append(best)
        return proposed, forks


def workspace_files(workspace: Workspace, most: int = MOST_FILES,
                    exclude: Iterable[str] = DEFAULT_EXCLUDE) -> list[Path]:
    """The workspace folders' source files (of the first `most` listed in each), inside
    them once symlinks and ".." are resolved, most recently modified first; a file gone
    since it was listed is left out, and one matching an `exclude` pattern is never opened."""
    languages, patterns = set(LINE_COMMENT), tuple(exclude)
    found = {path.resolve() for root in workspace.roots
             for paths in source_files(root, languages, most, patterns, INDEXED_MIN_BYTES).values() for path in paths}
    modified = {}
    for path in found:
        try:
            if workspace.contains(path):
                modified[path] = path.stat().st_mtime_ns
        except OSError:
            continue
    return sorted(modified, key=lambda path: (-modified[path], str(path)))


def within_vocabulary(match: Match, n_vocab: int) -> Match:
    """The match's proposal and branches cut at their first token id the vocabulary
    lacks: llama_decode refuses a whole batch with one (an index tokenized for another
    model's vocabulary)."""
    def cut(tokens: list[int]) -> list[int]:
        return next((tokens[:i] for i, token in enumerate(tokens) if not 0 <= token < n_vocab), tokens)

    proposed = cut(match.tokens)
    if not proposed:
        return NO_MATCH
    branches = {step: branch for step, tokens in match.branches.items()
                if step < len(proposed) and (branch := cut(tokens))}
    return Match(proposed, match.length, branches)


@dataclass
class SavedIndex:
    """An earlier build's files, their (size, modification time in ns) and tokens, and
    its sorted positions."""

    paths: list[str] = field(default_factory=list)
    stamps: list[tuple[int, int]] = field(default_factory=list)
    tokens: list[np.ndarray] = field(default_factory=list)
    order: np.ndarray | None = None
    numbers: dict[str, int] = field(init=False, repr=False)  # path -> its index in paths

    def __post_init__(self):
        self.numbers = {path: i for i, path in enumerate(self.paths)}

    def tokens_of(self, path: str, stamp: tuple[int, int]) -> np.ndarray | None:
        """The file's tokens if it is unchanged since; None otherwise."""
        index = self.numbers.get(path)
        return self.tokens[index] if index is not None and self.stamps[index] == stamp else None


def model_identity(model: Path) -> str:
    """The model file as it is now: its path, size and modification time. A GGUF replaced
    in place (another vocabulary, maybe) is another model; hashing its vocabulary would
    say so for certain, at the cost of reading it on every start."""
    try:
        stat = model.stat()
    except OSError:
        return f"{model.resolve()} (missing)"
    return f"{model.resolve()} {stat.st_size} {stat.st_mtime_ns}"


def saved_index_path(model: Path, roots: list[Path]) -> Path:
    """Where the index of these workspace folders, tokenized for this model file's
    vocabulary, is kept between runs."""
    parts = [f"format {SAVED_FORMAT}", model_identity(model), *sorted(map(str, roots))]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return cache_dir() / "index" / f"{key}.npz"


def _save(path: Path, table: TokenTable, stamps: list[tuple[int, int]]) -> None:
    """The table's files, stamps, tokens and order, readable by this user only: it is
    their source code."""
    lengths = np.diff(np.append(table.starts, len(table.tokens))) - 1  # each file's tokens, less its separator

    def write(temporary: Path) -> None:
        with temporary.open("wb") as handle:
            np.savez(handle, paths=np.array(table.paths, dtype=str), stamps=np.array(stamps, np.int64).reshape(-1, 2),
                     lengths=lengths, tokens=table.tokens, starts=table.starts, order=table.order)

    try:
        write_atomically(path, write, mode=0o600)
    except OSError as error:
        log.warning("could not keep the workspace index in %s: %s", path, error)


def _load(path: Path) -> SavedIndex:
    """What _save wrote; an empty SavedIndex when there is none or it does not read back
    (then it is removed: it would fail again on every start)."""
    if not path.is_file():
        return SavedIndex()
    try:
        with np.load(path, allow_pickle=False) as data:
            tokens, starts, lengths = data["tokens"], data["starts"], data["lengths"]
            files = [tokens[start : start + length] for start, length in zip(starts, lengths)]
            stamps = [tuple(map(int, stamp)) for stamp in data["stamps"]]
            saved = SavedIndex(data["paths"].tolist(), stamps, files, data["order"])
        if not len(saved.paths) == len(stamps) == len(files):
            raise ValueError("its arrays disagree")
        return saved
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as error:  # EOFError: an empty file
        log.warning("the saved workspace index %s does not read back (%s): removed, indexing from the files", path,
                    error or type(error).__name__)
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        return SavedIndex()


@dataclass(frozen=True)
class IndexStats:
    files: int = 0
    tokens: int = 0
    mb: float = 0.0
    build_s: float = 0.0
    ready: bool = False


def _tokens_of(path: Path, earlier: SavedIndex, tokenize: Callable[[str], list[int]]
               ) -> tuple[tuple[int, int], np.ndarray] | None:
    """The file's (size, modification time in ns) and tokens, from the earlier build when
    it is unchanged since; None when it is gone, unreadable or not text (nothing to
    draft from)."""
    try:
        stat = path.stat()
        stamp = (stat.st_size, stat.st_mtime_ns)
        tokens = earlier.tokens_of(str(path), stamp)
        if tokens is None:
            tokens = np.asarray(tokenize(path.read_text(encoding="utf-8")), np.int32)
    except (OSError, UnicodeError, ValueError):
        return None
    return stamp, tokens


# Held by the build under way: two never run at once (each briefly needs about 6 times
# its index's memory for the sort, and a reload's new build must not race the old one).
ONE_BUILD = threading.Lock()


class WorkspaceIndex:
    """The table of the workspace's files on disk, which files' copies in it are stale
    (hidden), and the newer text of those that changed since, each on its own small
    index. Lookups may run while a build is under way: they see the last table."""

    def __init__(self, options: DraftingOptions = DraftingOptions()):
        self.options = options
        self.table: TokenTable | None = None
        self.hidden: set[str] = set()  # paths whose copy in the table is stale
        self.stats = IndexStats()
        self._lock = threading.Lock()  # hidden, and swapping the table in

    def build(self, workspace: Workspace, tokenize: Callable[[str], list[int]], cancel: threading.Event | None = None,
              saved: Path | None = None, exclude: Iterable[str] = DEFAULT_EXCLUDE) -> IndexStats:
        """Index the workspace's files within drafting.index_mb, less SAVED_FILES_SHARE;
        `cancel` stops it at the next file (the table stays as it was). `saved`: a file
        holding the tokens of an earlier build (the same tokenizer's): files unchanged
        since (size and modification time) are not tokenized again, and the build is
        written back there. A file matching an `exclude` pattern (context.exclude) is never
        read. Waits for any other build to end first. A build that fails is logged and
        changes nothing."""
        cancel = cancel or threading.Event()
        with ONE_BUILD:
            if cancel.is_set():
                return self.stats
            try:
                return self._build(workspace, tokenize, cancel, saved, tuple(exclude))
            except Exception:  # in a thread nobody joins: said here, or never
                log.exception("the workspace index was not built; drafting from open documents only")
                return self.stats

    def _build(self, workspace: Workspace, tokenize: Callable[[str], list[int]], cancel: threading.Event,
               saved: Path | None, exclude: tuple[str, ...]) -> IndexStats:
        started = time.perf_counter()
        table_bytes = self.options.index_mb * (1 - SAVED_FILES_SHARE) * 2**20
        budget = int(table_bytes / BYTES_PER_TOKEN)  # tokens
        bytes_left = int(table_bytes * SOURCE_BYTES_PER_INDEX_BYTE)  # of source
        earlier = _load(saved) if saved is not None else SavedIndex()
        files: list[tuple[str, np.ndarray]] = []
        stamps: list[tuple[int, int]] = []
        used = 0
        for path in workspace_files(workspace, exclude=exclude):
            if cancel.is_set():
                return self.stats
            read = _tokens_of(path, earlier, tokenize)
            if read is None:
                continue
            stamp, tokens = read
            if used + len(tokens) > budget or stamp[0] > bytes_left:
                break
            files.append((str(path), tokens))
            stamps.append(stamp)
            used += len(tokens)
            bytes_left -= stamp[0]
        if cancel.is_set():  # before the sort: seconds on a large workspace
            return self.stats
        unchanged = [path for path, _ in files] == earlier.paths and stamps == earlier.stamps
        table = TokenTable(files, earlier.order if unchanged else None)
        if saved is not None and not unchanged:
            _save(saved, table, stamps)
        stats = IndexStats(len(files), table.token_count, table.nbytes / 2**20, time.perf_counter() - started, True)
        with self._lock:
            self.table, self.stats = table, stats
        log.info("workspace index: %d files, %d tokens, %.0f MB, in %.1f s", stats.files, stats.tokens, stats.mb,
                 stats.build_s)
        return stats

    def hide(self, path: str) -> None:
        """The file's copy in the table is stale (the editor has it open, or saved it)."""
        with self._lock:
            self.hidden.add(os.path.realpath(path))

    def show(self, path: str) -> None:
        with self._lock:
            self.hidden.discard(os.path.realpath(path))

    def lookup(self, tokens: list[int], k: int, n_vocab: int) -> Match:
        """The longest match of the text's end in the table's visible files, and the
        continuation most of its occurrences share, within a vocabulary of `n_vocab` ids."""
        table = self.table
        if table is None or k <= 0:
            return NO_MATCH
        length, positions = table.candidates(tokens, self.options.ngram_min_match, self.options.ngram_max_match)
        if not length:
            return NO_MATCH
        if self.hidden:
            with self._lock:
                hidden = [table.file_numbers[path] for path in self.hidden if path in table.file_numbers]
            if hidden:
                positions = positions[~np.isin(table.file_of(positions), hidden)]
        if not len(positions):
            return NO_MATCH
        proposed, branches = table.continuation(positions, k, self.options.tree_branches)
        return within_vocabulary(Match(proposed, length, branches), n_vocab)

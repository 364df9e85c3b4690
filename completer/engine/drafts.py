"""Draft providers: who guesses the next k tokens.

The draft model proposes with its probabilities (`ModelDrafter.propose`); n-gram
lookup proposes what followed an earlier occurrence of the text's end, as a point
mass (`NgramDrafter.lookup`). `tokens` is always the whole sequence so far; its last
token has not been evaluated by anyone yet.
"""

import threading
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass

import numpy as np

from completer.config import DraftingOptions
from completer.engine.documents import Documents
from completer.engine.kv import KVSequence, evaluate_in_pieces
from completer.engine.speculative import Sampling, probabilities, sample
from completer.engine.workspace_index import BRANCH_MOST, NO_MATCH, SAVED_FILES_SHARE, Match, WorkspaceIndex

# Candidate positions examined per lookup, most recent first: bounds the cost of a
# lookup on repetitive text.
MAX_CANDIDATES = 32
# The draft catches up on text it has not seen this many tokens at a time, its request's
# cancel flag checked between pieces: after a paste, the keystroke that follows waits for
# one piece, not the draft's whole prefill. The target's PROMPT_PIECE
# (completer.engine.generation, which imports this module).
CATCH_UP_PIECE = 64
# An NgramIndex's memory, as tracemalloc measured it (CPython 3.11, 5,000-token texts:
# 210-240 bytes a token): a token, its place in a list of ends, and their int objects;
# per distinct n-gram its tuple, its list and the dict's entry.
NGRAM_BYTES_PER_TOKEN = 90
NGRAM_BYTES_PER_GRAM = 150


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]
    q: np.ndarray | None  # [len(tokens), V] draft probabilities; None = point mass on each token
    draft_ms: float  # ms spent proposing these tokens
    match_length: int = 0  # n-gram only: context tokens matched before the proposal
    catch_up_ms: float = 0.0  # ms the draft model spent evaluating text it had not seen


NO_PROPOSAL = Proposal([], None, 0.0)


class ModelDrafter:
    """The draft model: k single-token steps on its own KV cache."""

    def __init__(self, sequence: KVSequence, target_vocab: int):
        self.sequence = sequence
        self.target_vocab = target_vocab

    def propose(self, tokens: list[int], k: int, sampling: Sampling, rng: np.random.Generator,
                cancel: threading.Event | None = None) -> Proposal:
        """k tokens after `tokens`; none when the request's `cancel` was set while catching
        up (what went in stays: the next request goes on from it)."""
        started = time.perf_counter()
        if not self._catch_up(tokens[:-1], cancel):
            return Proposal([], None, 0.0, catch_up_ms=(time.perf_counter() - started) * 1000)
        caught_up = time.perf_counter()
        self.sequence.expect_cut(k, one_batch=False)
        drafted: list[int] = []
        rows: list[np.ndarray] = []
        last = tokens[-1]
        for _ in range(k):
            # [1, V_target]: an id the target lacks (a draft may have up to 128 padding
            # entries more) would make the target's llama_decode refuse the whole batch.
            logits = self.sequence.extend([last], logits_at=[0])[:, : self.target_vocab]
            if sampling.greedy:
                last = int(logits[0].argmax())
            else:
                q = probabilities(logits, sampling)[0]
                last = sample(q, rng)
                rows.append(q)
            drafted.append(last)
        q = _pad_to(np.stack(rows), self.target_vocab) if rows else None
        # The cache now holds tokens + d1..d(k-1); the engine keeps what the target accepts.
        return Proposal(drafted, q, (time.perf_counter() - caught_up) * 1000,
                        catch_up_ms=(caught_up - started) * 1000)


    def _catch_up(self, text: list[int], cancel: threading.Event | None) -> bool:
        """The sequence holds `text`, evaluated CATCH_UP_PIECE tokens at a time; False once
        `cancel` is set. A draft whose state cannot be cut at the first change goes back
        to a checkpoint before it; where `text` changed what it held (an edit, not the
        tokens a round accepted), it keeps checkpoints on the way as the target does, so
        that the next edit goes back to one near it rather than to the start."""
        evaluate_in_pieces(self.sequence, text, CATCH_UP_PIECE, cancel, checkpoints_when_appended=False)
        return len(self.sequence.tokens) == len(text)


def _pad_to(q: np.ndarray, size: int) -> np.ndarray:
    """q [k, V_draft] as [k, size]: a draft with fewer entries never proposes the rest."""
    return np.pad(q, ((0, 0), (0, size - q.shape[1])))


class NgramIndex:
    """Where each `min_match`-gram of a token sequence occurs; grows as the sequence
    does. Matches are measured up to `max_match` tokens (drafting.ngram_*_match)."""

    def __init__(self, tokens: list[int] | None = None, min_match: int = DraftingOptions().ngram_min_match,
                 max_match: int = DraftingOptions().ngram_max_match):
        self.min_match, self.max_match = min_match, max_match
        self.tokens: list[int] = []
        self.ends: dict[tuple[int, ...], list[int]] = defaultdict(list)  # n-gram -> positions just after it
        self.extend(tokens or [])

    @property
    def nbytes(self) -> int:
        """Its memory, estimated (NGRAM_BYTES_PER_*)."""
        return NGRAM_BYTES_PER_TOKEN * len(self.tokens) + NGRAM_BYTES_PER_GRAM * len(self.ends)

    def extend(self, tokens: list[int]) -> None:
        start = len(self.tokens)
        self.tokens.extend(tokens)
        for end in range(max(start, self.min_match - 1) + 1, len(self.tokens) + 1):
            self.ends[tuple(self.tokens[end - self.min_match : end])].append(end)

    def longest_match(self, suffix: list[int], before: int) -> tuple[int, int]:
        """(match length, position after the match) of the occurrence of `suffix`'s end
        that matches it furthest back, among positions < `before`; (0, -1) if none."""
        best_length, best_end = 0, -1
        candidates = self.ends.get(tuple(suffix[-self.min_match:]), [])
        examined = 0
        for end in reversed(candidates):
            if end >= before:
                continue
            # The longest length that matches, by bisection over slice comparisons (in C).
            length, limit = self.min_match, min(self.max_match, end, len(suffix))
            while length < limit:
                longer = (length + limit + 1) // 2
                if self.tokens[end - longer : end] == suffix[-longer:]:
                    length = longer
                else:
                    limit = longer - 1
            if length > best_length:
                best_length, best_end = length, end
            examined += 1
            if examined >= MAX_CANDIDATES or best_length == self.max_match:
                break
        return best_length, best_end


class NgramDrafter:
    """Prompt lookup: find the longest earlier occurrence of the text's last tokens, in
    this document, in other open ones, in files saved since the workspace index was built
    (lookup) or in the workspace index (lookup_workspace), and propose what followed it.

    The saved files' indexes take up to SAVED_FILES_SHARE of drafting.index_mb (the
    workspace index the rest), the least recently saved or drafted from dropped first:
    an editor saves every file it edits, and each index costs about 230 bytes a token."""

    def __init__(self, options: DraftingOptions = DraftingOptions(), workspace: WorkspaceIndex | None = None,
                 documents: Documents | None = None):
        """`documents`: the engine's, which hold the other open documents' texts."""
        self.options = options
        self.document = self._index([])
        self.documents = documents if documents is not None else Documents()
        # Workspace files saved since the index was built, by path, least recently used first.
        self.saved_files: OrderedDict[str, NgramIndex] = OrderedDict()
        self.saved_bytes = 0  # their nbytes together; read from any thread (statistics)
        self.workspace = workspace
        self._stale = False  # some index was built with other match lengths than the options'

    def _index(self, tokens: list[int]) -> NgramIndex:
        return NgramIndex(tokens, self.options.ngram_min_match, self.options.ngram_max_match)

    def _current(self, index: NgramIndex) -> NgramIndex:
        """`index`, built again if the match lengths changed since it was built."""
        if (index.min_match, index.max_match) == (self.options.ngram_min_match, self.options.ngram_max_match):
            return index
        return self._index(index.tokens)

    @property
    def saved_budget_bytes(self) -> int:
        return int(self.options.index_mb * 2**20 * SAVED_FILES_SHARE)

    def configure(self, options: DraftingOptions) -> None:
        """New options. An index is built again with new match lengths when next looked up,
        not here: this may run on the language server's event loop, and rebuilding every
        saved file's index took it for as long as tokens there were."""
        lengths = (options.ngram_min_match, options.ngram_max_match)
        self._stale = self._stale or lengths != (self.options.ngram_min_match, self.options.ngram_max_match)
        self.options = options
        self._within_budget()

    def lookup_workspace(self, tokens: list[int], k: int, n_vocab: int, longer_than: int = 0) -> Match:
        """The workspace index's proposal, for a match longer than `longer_than` tokens
        (the open documents' own: they win a tie, being what is worked on), of token ids
        below `n_vocab` (the target's vocabulary) only."""
        if self.workspace is None or longer_than >= self.options.ngram_max_match:
            return NO_MATCH
        found = self.workspace.lookup(tokens, k, n_vocab)
        return found if found.length > longer_than else NO_MATCH

    def set_document(self, tokens: list[int]) -> None:
        """Index the current text, reusing the index while the text only grew."""
        known = self.document.tokens
        if len(tokens) >= len(known) and tokens[: len(known)] == known:
            self.document.extend(tokens[len(known) :])
        else:
            self.document = self._index(tokens)

    def set_other_document(self, key: str, tokens: list[int]) -> None:
        self.documents.set_text(key, self._index(tokens))

    def remove_other_document(self, key: str) -> None:
        """The document is the live one now: its text is the text looked up in."""
        if (document := self.documents.find(key)) is not None:
            document.text = None

    def saved_file_index(self, tokens: list[int]) -> NgramIndex:
        """The index set_saved_file takes: built apart, so that the engine need not wait for it."""
        return self._index(tokens)

    def set_saved_file(self, path: str, index: NgramIndex) -> None:
        """Draft from this index of the file, the most recently used of the saved files."""
        self._drop_saved_file(path)
        self.saved_files[path] = index = self._current(index)  # the options may have changed since it was built
        self.saved_bytes += index.nbytes
        self._within_budget()

    def _drop_saved_file(self, path: str) -> None:
        index = self.saved_files.pop(path, None)
        if index is not None:
            self.saved_bytes -= index.nbytes

    def _within_budget(self) -> None:
        """The least recently used saved files out, until the rest fit their budget."""
        while self.saved_files and self.saved_bytes > self.saved_budget_bytes:
            self._drop_saved_file(next(iter(self.saved_files)))

    def has_saved_file(self, path: str) -> bool:
        return path in self.saved_files

    def use_index(self, workspace: WorkspaceIndex | None) -> None:
        """Look up in this workspace index from now on (None: in no index)."""
        self.workspace = workspace

    def _rebuild_stale(self) -> None:
        """The indexes built before the match lengths changed, built again (configure)."""
        self.document = self._current(self.document)
        for _, document in self.documents.all():
            if document.text is not None:
                document.text = self._current(document.text)
        for path, index in list(self.saved_files.items()):
            if (current := self._current(index)) is not index:
                self.saved_files[path] = current  # its place in the order stays
                self.saved_bytes += current.nbytes - index.nbytes
        self._within_budget()
        self._stale = False

    def lookup(self, tokens: list[int], k: int) -> Match:
        """The proposal for the text `tokens`: what followed its longest match in this
        document, another open one, or a file saved since the index was built."""
        if len(tokens) < self.options.ngram_min_match or k <= 0:
            return NO_MATCH
        if self._stale:
            self._rebuild_stale()
        self.set_document(tokens)
        best_length, best_index, best_end, best_saved = 0, self.document, -1, None
        # Only occurrences with a token after them can propose anything.
        candidates = [(self.document, None), *((index, None) for index in self.documents.texts()),
                      *((index, path) for path, index in self.saved_files.items())]
        for index, saved_path in candidates:
            before = len(tokens) if index is self.document else len(index.tokens)
            length, end = index.longest_match(tokens, before)
            if length > best_length:
                best_length, best_index, best_end, best_saved = length, index, end, saved_path
        if best_end < 0:
            return NO_MATCH
        if best_saved is not None:
            self.saved_files.move_to_end(best_saved)  # drafted from: the last to be dropped
        proposal = best_index.tokens[best_end : best_end + k]
        if best_index is self.document:
            # A match whose continuation runs into the text's end: the text repeats, so the
            # copy goes on from itself (LZ77's overlapping copy): else a line written over
            # and over gets a token or two proposed a round from the longest matches
            # (measured: docs/speculative-decoding.md, "Measurements behind the engine's
            # constants").
            while len(proposal) < k:
                proposal.append(proposal[best_end + len(proposal) - len(tokens)])
        return Match(proposal, best_length)


class CopyDrafter:
    """Copy drafting, for a rewrite of a text the prompt holds (a next edit rewrites its
    editable region, and most of what it writes is the region as it was): proposes the
    original's continuation from where the rewrite stands. The rewrite so far is aligned
    to the original by the longest match of its end (any length: a rewrite is a copy, so
    even one token places it), a tie going to the place the last proposal led to (the
    copy going on) and then to the earliest; after a divergence the next lookup aligns
    afresh. Before the rewrite has any token, the original's beginning is proposed.

    Where the alignment is ambiguous (the rewrite's end occurs twice in the original as
    far as it is matched: a line written twice), the other places' continuations come
    with the proposal as token-tree branches, each from the first step where it parts
    from the proposal, up to `branches` of them: one batch verifies both copies."""

    def __init__(self, original: list[int], start: int, max_match: int = DraftingOptions().ngram_max_match,
                 branches: int = 0):
        self.original = original
        self.start = start  # where the rewrite begins in the sequence: the prompt's length
        self.max_match = max_match
        self.branches = branches
        self.after: dict[int, list[int]] = defaultdict(list)  # token -> positions just after it in `original`
        for position, token in enumerate(original):
            self.after[token].append(position + 1)
        self.expected = 0  # where the last proposal's copy goes on

    def lookup(self, tokens: list[int], k: int) -> Match:
        """The proposal for the sequence `tokens` (prompt and rewrite so far): up to `k`
        tokens of the original, and the length of the match that placed them."""
        written = tokens[self.start:]
        if k <= 0:
            return NO_MATCH
        if not written:
            return self._from(0, 0, k)
        best_length, best_end, tied = 0, -1, []  # tied: the other ends matched as far
        for end in self.after.get(written[-1], []):
            length, limit = 1, min(self.max_match, end, len(written))
            while length < limit:  # the longest length that matches, by bisection
                longer = (length + limit + 1) // 2
                if self.original[end - longer:end] == written[-longer:]:
                    length = longer
                else:
                    limit = longer - 1
            if length > best_length:
                best_length, best_end, tied = length, end, []
            elif length == best_length and end == self.expected:
                tied, best_end = [*tied, best_end], end
            elif length == best_length:
                tied.append(end)
        if best_end < 0 or best_end >= len(self.original):
            return NO_MATCH
        return self._from(best_end, best_length, k, tuple(tied))

    def _from(self, position: int, length: int, k: int, tied: tuple[int, ...] = ()) -> Match:
        proposal = self.original[position:position + k]
        self.expected = position + len(proposal)
        forks: dict[int, list[int]] = {}
        for end in tied:
            if len(forks) == self.branches:
                break
            other = self.original[end:end + len(proposal)]
            step = next((i for i, (a, b) in enumerate(zip(proposal, other)) if a != b), None)
            if step is not None and step not in forks:
                forks[step] = self.original[end + step:end + step + BRANCH_MOST]
        return Match(proposal, length, forks)

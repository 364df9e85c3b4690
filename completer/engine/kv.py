"""A sequence in a llama.cpp KV cache, and the tokens it holds."""

import itertools
import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import NamedTuple

from completer.models.llama import Checkpoint, LlamaContext, LlamaModel

log = logging.getLogger(__name__)


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix. List slices compare in C, so a binary
    search over them beats a Python loop on the thousands of tokens of a prompt."""
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while low < high:  # a[:low] == b[:low] and a[:high+1] != b[:high+1]
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


# A checkpoint every this many tokens of the prompt, so that an edit far from the last
# ones (a line deleted 20 lines up) goes back at most this far before it. On a random
# qwen35 at a 0.5B model's shapes, such an edit evaluated 1,423 tokens again without them
# where full attention evaluated 186; a state there is 20 MB (52 MB for Mamba-2's), and
# taking one costs milliseconds next to the seconds 256 tokens take.
CHECKPOINT_SPACING = 256


def checkpoint_lengths(prompt: list[int], edited: int, start: int, model: LlamaModel) -> list[int]:
    """Where to keep checkpoints while evaluating prompt[start:], the prompt having
    changed at `edited`: where the next change is likely. The next keystroke edits where
    this one did or at the cursor (just before a fill-in-the-middle prompt's suffix token,
    before any keystroke has shown where edits go), or a line around them: so those
    places and the starts of their line and the line before. Typing on adds after the
    prompt's end, whose last token or two may be retokenized: so two tokens before the
    end, and the end itself. Elsewhere, every CHECKPOINT_SPACING tokens."""
    places = {edited}
    if model.special.fim_suffix in prompt:
        places.add(prompt.index(model.special.fim_suffix))
    wanted = {len(prompt) - 2, len(prompt), *range(CHECKPOINT_SPACING, len(prompt), CHECKPOINT_SPACING)}
    for place in places:
        line_starts = (i + 1 for i in range(place - 1, -1, -1) if model.breaks_line(prompt[i]))
        wanted |= {place, *itertools.islice(line_starts, 2)}
    return sorted(length for length in wanted if start < length <= len(prompt))


class SavedSequence(NamedTuple):
    """A sequence put aside (KVSequence.save): its tokens, llama.cpp's state of them and
    its checkpoints."""

    tokens: list[int]
    state: bytes
    checkpoints: dict[int, Checkpoint] = {}

    @property
    def nbytes(self) -> int:
        return len(self.state) + sum(len(state) for state in self.checkpoints.values())


class CheckpointBudget:
    """The memory for the checkpoints of a document's live sequences, the target's and
    the draft model's together (cache.checkpoint_mb). Past it, the sequence holding the
    most checkpoints gives up its oldest (of two holding as many, the one that joined
    later: the draft's, made after the target's), so that neither's evaluation of a
    prompt pushes out all the other's."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        # Weak: a draft model dropped mid-session takes its checkpoints with it.
        self._members: list[weakref.ref[Checkpoints]] = []

    @property
    def members(self) -> list["Checkpoints"]:
        return [member for ref in self._members if (member := ref()) is not None]

    def join(self, checkpoints: "Checkpoints") -> None:
        self._members.append(weakref.ref(checkpoints))

    def limit(self, limit_bytes: int) -> None:
        """A new budget (the option changed): what is over it goes now, not at the next checkpoint."""
        self.limit_bytes = limit_bytes
        self.evict()

    def evict(self) -> None:
        members = self.members[::-1]  # latest first: max() keeps the first of equals
        while sum(member.nbytes for member in members) > self.limit_bytes:
            max(members, key=lambda member: len(member.states)).drop_oldest()


@dataclass(eq=False)
class Checkpoints:
    """States of a sequence whose memory cannot be cut anywhere (recurrent layers), each
    at the length it was taken (LlamaContext.checkpoint), within a `budget` shared with
    the document's other sequences. A cut goes back to the latest one at or before it and
    evaluates the rest again. A round's checkpoint (not `lasting`) serves that round
    alone: the next one replaces it."""

    budget: CheckpointBudget
    states: dict[int, Checkpoint] = field(default_factory=dict)  # length -> state, oldest first
    lasting: set[int] = field(default_factory=set)  # the lengths placed for edits, not for a round

    def __post_init__(self):
        self.budget.join(self)

    @property
    def nbytes(self) -> int:
        return sum(len(state) for state in self.states.values())

    def add(self, length: int, state: Checkpoint, lasting: bool) -> None:
        for at in [at for at in self.states if at not in self.lasting or at == length]:
            del self.states[at]
        self.states[length] = state
        if lasting:
            self.lasting.add(length)
        self.budget.evict()

    def drop_oldest(self) -> None:
        oldest = next(iter(self.states))
        del self.states[oldest]
        self.lasting.discard(oldest)

    def latest(self, n: int) -> tuple[int, Checkpoint] | None:
        """The checkpoint of greatest length at most n."""
        length = max((at for at in self.states if at <= n), default=None)
        return None if length is None else (length, self.states[length])

    def drop_after(self, n: int) -> None:
        """The tokens past n changed: checkpoints taken past them no longer hold."""
        for length in [at for at in self.states if at > n]:
            del self.states[length]
        self.lasting &= set(self.states)


class KVSequence:
    """A context's sequence of tokens. `tokens` is exactly what its KV cache holds: every
    operation leaves llama.cpp's own length of the sequence equal to len(tokens), or
    empties both (the caller then evaluates its prompt again).

    Where the model's memory cannot be cut at any position (recurrent layers), a cut
    goes back to a checkpoint before it, or to llama.cpp's rollback within the last
    batch, and evaluates the tokens between again (`replayed` counts them)."""

    def __init__(self, context: LlamaContext, budget: CheckpointBudget | float = 0.0):
        """`budget`: its checkpoints' memory, shared with the document's other sequences,
        or MB of its own."""
        self.context = context
        self.tokens: list[int] = []
        self.evaluated = 0  # tokens run through the model since creation: what caching saves
        self.replayed = 0  # of those, tokens evaluated again after going back to a checkpoint
        if not isinstance(budget, CheckpointBudget):
            budget = CheckpointBudget(int(budget * 2**20))
        self.checkpoints = Checkpoints(budget)
        context.truncate(0)

    @property
    def consistent(self) -> bool:
        """llama.cpp holds as many tokens for the sequence as the list says."""
        return self.context.length() == len(self.tokens)

    def reset(self, why: str) -> None:
        """Empty both the KV and the list, after `why` broke their agreement."""
        log.warning("KV cache of %s: %s; emptied it, its prompt will be evaluated again",
                    self.context.model.path.name, why)
        self.context.truncate(0)
        self.tokens = []
        self.checkpoints.drop_after(0)

    def truncate(self, n: int) -> None:
        """Hold exactly the first n tokens (of those held)."""
        if n >= len(self.tokens):
            return
        wanted = self.tokens[:n]
        kept = self.rewind(n)
        if kept < n:
            self.extend(wanted[kept:])
            self.replayed += n - kept

    def rewind(self, n: int) -> int:
        """Hold at most the first n tokens: as many as can be kept without evaluating
        any. That is n where the cache can be cut there, else the latest checkpoint's
        length at or before n (0 without one). Returns the length held. A KV that
        disagrees with the list is emptied first: nothing of it is known to be right."""
        if not self.consistent:
            self.reset(f"llama.cpp holds {self.context.length()} tokens, the list {len(self.tokens)}")
        if n >= len(self.tokens):
            return len(self.tokens)
        if not self.context.cut(n):
            found = self.checkpoints.latest(n)
            n = 0 if found is None else found[0]
            try:
                if found is None:
                    self.context.truncate(0)
                else:
                    self.context.return_to(found[1], n)
            except RuntimeError as error:
                self.reset(str(error))
                return 0
        del self.tokens[n:]
        self.checkpoints.drop_after(n)
        return n

    def checkpoint(self, lasting: bool = True) -> None:
        """Keep the state at the current length to come back to, where the model's memory
        cannot be cut anywhere. `lasting`: placed where edits happen, kept over the
        checkpoints rounds take."""
        if not self.context.cuts_anywhere and self.tokens and self.checkpoints.budget.limit_bytes > 0:
            self.checkpoints.add(len(self.tokens), self.context.checkpoint(), lasting)

    def expect_cut(self, width: int, one_batch: bool = True) -> None:
        """The next `width` tokens evaluated (in one batch, or not: a draft's steps) may be
        cut back to the current length: keep a checkpoint here unless llama.cpp can take
        them back itself."""
        if self.context.cuts_anywhere or (one_batch and self.context.can_take_back(width)):
            return
        self.checkpoint(lasting=False)

    def extend(self, tokens: list[int], logits_at: tuple[int, ...] | list[int] = (), argmax: bool = False):
        """Evaluate `tokens` after what the cache holds; logits of the chosen indices (with
        `argmax`, their largest logits' indices only). A failure (llama.cpp decodes in
        chunks: earlier ones may have gone in) cuts the KV back to the list before it is
        raised."""
        try:
            logits = self.context.eval(tokens, len(self.tokens), logits_at, argmax)
        except (RuntimeError, ValueError):
            if not (self.context.cut(len(self.tokens)) and self.consistent):
                self.reset("a failed evaluation left its KV unlike its token list")
            raise
        self.tokens.extend(tokens)
        self.evaluated += len(tokens)
        return logits

    def extend_tree(self, tokens: list[int], branches: list[tuple[int, list[int]]]):
        """Evaluate `tokens` after what the cache holds, and beside them the branches (at,
        tokens) that replace tokens[at:] (LlamaContext.eval_tree): the argmax of every
        row, of tokens and of each branch. Settle with take_branch or drop_branches."""
        try:
            best = self.context.eval_tree(tokens, len(self.tokens), branches)
        except (RuntimeError, ValueError):
            self.context.drop_branches()
            if not (self.context.cut(len(self.tokens)) and self.consistent):
                self.reset("a failed evaluation left its KV unlike its token list")
            raise
        self.tokens.extend(tokens)
        self.evaluated += len(tokens) + sum(len(branch) for _, branch in branches)
        return best

    def take_branch(self, index: int, at: int, kept: list[int]) -> None:
        """The tokens from `at` on become `kept`, the first tokens of the last
        extend_tree's branch `index` (0-based, in its list), whose cells hold them already."""
        # keep_branch numbers branches as their llama.cpp sequences: 0 is the text's.
        self.context.keep_branch(index + 1, at, len(kept))
        self.tokens[at:] = kept

    def drop_branches(self) -> None:
        """Free the last extend_tree's branches: the tokens stay as extend_tree left them."""
        self.context.drop_branches()

    def save(self) -> SavedSequence:
        """The tokens, their KV state and the checkpoints, to put back later with
        restore(). A sequence whose KV disagrees with its list is saved empty: its state
        is not what the list says."""
        if not self.consistent:
            self.reset("its KV and token list disagree at a save")
        if not self.tokens:
            return SavedSequence([], b"")
        return SavedSequence(list(self.tokens), self.context.save(), dict(self.checkpoints.states))

    def restore(self, saved: SavedSequence) -> bool:
        """Hold a saved sequence again; False (and empty) when llama.cpp could not."""
        tokens, state, checkpoints = saved
        self.tokens = []
        self.checkpoints.drop_after(0)
        if not tokens:
            self.context.truncate(0)
            return True
        try:
            self.context.restore(state)
        except RuntimeError as error:
            self.reset(f"restoring its saved state failed ({error})")
            return False
        self.tokens = list(tokens)
        if not self.consistent:
            self.reset(f"a restored state holds {self.context.length()} tokens, not {len(tokens)}")
            return False
        for length, checkpoint in checkpoints.items():
            self.checkpoints.add(length, checkpoint, lasting=True)
        return True

    def sync(self, tokens: list[int]) -> None:
        """Hold exactly `tokens`: cut at the first difference, evaluate the rest."""
        common = common_prefix_length(self.tokens, tokens)
        kept = self.rewind(common)
        self.replayed += common - kept
        if len(tokens) > kept:
            self.extend(tokens[kept:])


def evaluate_in_pieces(sequence: KVSequence, tokens: list[int], piece: int, cancel: threading.Event | None,
                       checkpoints_when_appended: bool = True, until: int | None = None) -> int:
    """sequence.sync(tokens), `piece` tokens at a time; once `cancel` is set, no further
    piece (what went in stays, for the request that comes next); with `until`, no further
    than tokens[:until] (a later call goes on). Where the model's state cannot be cut
    anywhere, it goes back to the checkpoint before the first change, and keeps
    checkpoints on the way where the next change is likely (checkpoint_lengths, of all
    of `tokens`); without `checkpoints_when_appended`, only where `tokens` changed what
    the sequence held, not where they add to it (a draft's rounds, which keep checkpoints
    of their own). Returns how many tokens before the first change it had to evaluate again."""
    edited = common_prefix_length(sequence.tokens, tokens)
    appended = 0 < edited == len(sequence.tokens)
    end = sequence.rewind(edited)
    rewound = edited - end
    marked = not sequence.context.cuts_anywhere and (checkpoints_when_appended or not appended)
    marks = checkpoint_lengths(tokens, edited, end, sequence.context.model) if marked else []
    last = len(tokens) if until is None else min(until, len(tokens))
    while not (cancel is not None and cancel.is_set()) and end < last:
        end = min(end + piece, last, *(mark for mark in marks if mark > end))
        sequence.sync(tokens[:end])
        if end in marks:
            sequence.checkpoint()
    return rewound

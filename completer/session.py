"""Documents' KV caches across switches.

The engine serves one document at a time from its live caches. When the editor
switches to another document, the live caches are saved to memory (llama.cpp's
per-sequence state) and the other document's are put back, so returning to a
recently used document evaluates only what changed. Saved states live within a
budget in MB, least recently used first out.
"""

from collections import OrderedDict
from dataclasses import dataclass

from completer.engine import Engine
from completer.kv import KVSequence


@dataclass
class Snapshot:
    """A document's saved caches: (tokens, state) per live sequence."""

    sequences: list[tuple[list[int], bytes]]

    @property
    def size_bytes(self) -> int:
        return sum(len(state) for _, state in self.sequences)


class DocumentCaches:
    def __init__(self, engine: Engine, budget_mb: float):
        self.engine = engine
        self.budget_bytes = int(budget_mb * 2**20)
        self.current: str | None = None
        self.saved: OrderedDict[str, Snapshot] = OrderedDict()  # least recently used first

    def _sequences(self) -> list[KVSequence]:
        drafter = self.engine.drafter
        return [self.engine.target] + ([drafter.sequence] if drafter else [])

    @property
    def saved_bytes(self) -> int:
        return sum(snapshot.size_bytes for snapshot in self.saved.values())

    def activate(self, document: str) -> None:
        """Make `document`'s caches the live ones."""
        if document == self.current:
            return
        snapshot = self.saved.pop(document, None)  # taken first: saving must not evict it
        if self.current is not None:
            self.saved[self.current] = Snapshot([sequence.save() for sequence in self._sequences()])
            while self.saved and self.saved_bytes > self.budget_bytes:
                self.saved.popitem(last=False)
        for index, sequence in enumerate(self._sequences()):
            if snapshot is not None:
                sequence.restore(snapshot.sequences[index])
            else:
                sequence.truncate(0)
        self.current = document


@dataclass
class ForwardCache:
    """The completion last shown in a document. When the user types what it starts
    with, the rest is the answer, with no model call. It is also the better answer:
    a prompt re-tokenized with the cursor inside one of its tokens can derail a small
    model (seen on smol: ".i.i.i" after typing 2 characters of "into"), which only
    token healing would fix."""

    text_before: str = ""  # the document's text before the cursor when it was shown
    completion: str = ""

    def remember(self, text_before: str, completion: str) -> None:
        self.text_before, self.completion = text_before, completion

    def lookup(self, text_before: str) -> str | None:
        """The rest of the shown completion, if the text before the cursor is the old
        one plus a start of it; None otherwise."""
        if not self.completion or not text_before.startswith(self.text_before):
            return None
        typed = text_before[len(self.text_before) :]
        if not self.completion.startswith(typed) or typed == self.completion:
            return None
        return self.completion[len(typed) :]

"""What the engine keeps of each open document, in one place: its saved KV caches (with
their checkpoints), its text for n-gram lookup while another document is live, and its
acceptance curves. Closing a document is one removal (Engine.forget)."""

import itertools
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from completer.engine.kv import SavedSequence

if TYPE_CHECKING:  # drafts and tuning import this module
    from completer.engine.drafts import NgramIndex
    from completer.engine.tuning import AcceptanceCurve


@dataclass
class Snapshot:
    """A document's saved caches, one per live sequence, each with its checkpoints."""

    sequences: list[SavedSequence]
    used: int = 0  # when it was saved, in switches: the least recently used goes first

    @property
    def size_bytes(self) -> int:
        return sum(saved.nbytes for saved in self.sequences)


@dataclass(eq=False)
class EngineDocument:
    """What the engine keeps of one open document."""

    # Its saved caches while another document's are live: its completions' (False) and
    # its next edits' (True), whose prompts share next to nothing (Engine.activate).
    snapshots: dict[bool, Snapshot] = field(default_factory=dict)
    # Its text, for n-gram lookup while another document is live; `text_order` keeps the
    # order texts came in, which decides a tie between two documents' matches.
    text: "NgramIndex | None" = None
    text_order: int = 0
    curves: dict[tuple[str, int, bool], "AcceptanceCurve"] = field(default_factory=dict)  # (provider, bucket, edits) ->


class Documents:
    """The open documents' EngineDocuments by the editor's name, and which document's
    caches are live. Snapshots change with the engine; `saved_bytes` and `names` are read
    from any thread (statistics), so the map changes and is read under its own lock."""

    def __init__(self, budget_bytes: int = 0):
        self.budget_bytes = budget_bytes  # the saved snapshots together (cache.budget_mb)
        self.live: tuple[str, bool] | None = None  # (document, edits): whose caches the live sequences hold
        self._by_name: dict[str, EngineDocument] = {}
        self._lock = threading.Lock()
        self._clock = itertools.count(1)  # Snapshot.used, EngineDocument.text_order

    def get(self, name: str) -> EngineDocument:
        """The document's state, made empty when it has none yet."""
        with self._lock:
            return self._by_name.setdefault(name, EngineDocument())

    def find(self, name: str) -> EngineDocument | None:
        with self._lock:
            return self._by_name.get(name)

    def all(self) -> list[tuple[str, EngineDocument]]:
        with self._lock:
            return list(self._by_name.items())

    def names(self) -> list[str]:
        with self._lock:
            return list(self._by_name)

    def forget(self, name: str) -> None:
        """The document closed: all the engine kept of it goes."""
        with self._lock:
            self._by_name.pop(name, None)
        if self.live is not None and self.live[0] == name:
            self.live = None

    @property
    def saved_bytes(self) -> int:
        return sum(snapshot.size_bytes for _, snapshot in self._snapshots())

    def _snapshots(self) -> list[tuple[EngineDocument, Snapshot]]:
        with self._lock:
            documents = list(self._by_name.values())
        return [(document, snapshot) for document in documents for snapshot in list(document.snapshots.values())]

    def take_snapshot(self, name: str, edits: bool) -> Snapshot | None:
        """The document's saved caches of that kind, which are no longer saved."""
        document = self.find(name)
        return None if document is None else document.snapshots.pop(edits, None)

    def keep_snapshot(self, name: str, edits: bool, snapshot: Snapshot) -> None:
        """Save the document's caches of that kind; the least recently used snapshots go
        while all are over the budget."""
        snapshot.used = next(self._clock)
        self.get(name).snapshots[edits] = snapshot
        saved = self._snapshots()
        total = sum(snapshot.size_bytes for _, snapshot in saved)
        for document, oldest in sorted(saved, key=lambda pair: pair[1].used):
            if total <= self.budget_bytes:
                break
            total -= oldest.size_bytes
            document.snapshots = {kind: kept for kind, kept in document.snapshots.items() if kept is not oldest}

    def set_text(self, name: str, text: "NgramIndex") -> None:
        """The document's text for n-gram lookup, in the order of texts after those set before."""
        document = self.get(name)
        if document.text is None:
            document.text_order = next(self._clock)
        document.text = text

    def texts(self) -> list["NgramIndex"]:
        """The documents' texts for n-gram lookup, in the order they came in."""
        with_text = [document for _, document in self.all() if document.text is not None]
        return [document.text for document in sorted(with_text, key=lambda document: document.text_order)]

    def clear(self) -> None:
        """Every document's saved caches and text go (their acceptance curves stay)."""
        for _, document in self.all():
            document.snapshots, document.text = {}, None
        self.live = None

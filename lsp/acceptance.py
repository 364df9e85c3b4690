"""What the user took of the suggestions, and what of that stayed: the characters accepted
(whole suggestions, and the parts taken a word or a line at a time), and how many of them
are still in the document 30 s and 2 min later, as Copilot's language server measures
them; and the next-edit suggestions accepted (EditAcceptances). The server checks its own
copy of each document; the figures go to completer/stats and nowhere else.

A suggestion is shown at an offset, and acceptance puts its text there; the editor may say
so before or after the change that inserts it. Every later change moves what was
accepted (an edit before it shifts it, one inside it grows or shrinks it), and a check
counts the accepted characters it still finds, in order, in that span and a margin
around it as wide as the text (so that the order of those two messages does not matter).
"""

import difflib
from collections import OrderedDict
from dataclasses import dataclass, field

# When what was accepted is checked, seconds after its acceptance (Copilot's 30 s and 2 min).
RETENTION_CHECKS_S = (30.0, 120.0)
# Items remembered for their didShowCompletion, didPartiallyAcceptCompletion and accept
# command: an editor reports on the suggestion on screen, never on one many requests old.
ITEMS_KEPT = 64


@dataclass
class Offered:
    """A suggestion returned to the editor."""

    uri: str
    offset: int  # where its text goes
    text: str  # the completion (not the rest of the line an inline item re-inserts)
    accepted: int = 0  # characters of `text` taken so far
    seen: bool = False  # the editor said it showed it


@dataclass
class Accepted:
    """Accepted text, and the span of its document where it now is."""

    uri: str
    text: str
    start: int
    end: int

    def moved(self, start: int, end: int, inserted: int) -> None:
        """The document's [start, end) was replaced by `inserted` characters."""
        self.start, self.end = moved_start(self.start, start, end, inserted), moved_end(self.end, start, end, inserted)

    def kept(self, document: str) -> int:
        """Characters of the text still there: its longest matching pieces, in order."""
        margin = len(self.text)
        span = document[max(0, self.start - margin) : self.end + margin]
        blocks = difflib.SequenceMatcher(None, self.text, span, autojunk=False).get_matching_blocks()
        return sum(block.size for block in blocks)


def moved_start(position: int, start: int, end: int, inserted: int) -> int:
    """Where a span that began at `position` begins once [start, end) is replaced by
    `inserted` characters: its first character moves with the text after the change (text
    inserted at it goes in front), and where the change replaced it, the span begins where
    the new text does."""
    if position < start:
        return position
    if position >= end:
        return position + inserted - (end - start)
    return start


def moved_end(position: int, start: int, end: int, inserted: int) -> int:
    """Where a span that ended at `position` (after its last character) ends once [start,
    end) is replaced by `inserted` characters: text inserted at its end stays out of it,
    and where the change replaced its last character, it ends where the new text does."""
    if position <= start:
        return position
    if position > end:
        return position + inserted - (end - start)
    return start + inserted


@dataclass
class Retention:
    """Accepted characters checked at one of RETENTION_CHECKS_S, and of those, still there."""

    checked: int = 0
    retained: int = 0


@dataclass
class Acceptances:
    """The suggestions offered, what was accepted of them, and its retention checks."""

    offered: OrderedDict[int, Offered] = field(default_factory=OrderedDict)  # item id -> suggestion
    tracked: list[Accepted] = field(default_factory=list)  # accepted text not checked for the last time
    seen: int = 0  # items the editor said it showed (didShowCompletion)
    partially_accepted: int = 0  # items taken in part at least once (didPartiallyAcceptCompletion)
    accepted_chars: int = 0
    retention: tuple[Retention, ...] = field(default_factory=lambda: tuple(Retention() for _ in RETENTION_CHECKS_S))

    def offer(self, item: int, uri: str, offset: int, text: str) -> None:
        self.offered[item] = Offered(uri, offset, text)
        while len(self.offered) > ITEMS_KEPT:
            self.offered.popitem(last=False)

    def shown(self, item: int) -> None:
        offered = self.offered.get(item)
        if offered is not None and not offered.seen:
            offered.seen = True
            self.seen += 1

    def take(self, item: int, characters: int | None = None) -> Accepted | None:
        """The editor took the item's first `characters` (all of it: None); the newly
        accepted text, to check later; None when nothing new was taken (an item unknown,
        or a part already counted)."""
        offered = self.offered.get(item)
        if offered is None:
            return None
        upto = len(offered.text) if characters is None else min(characters, len(offered.text))
        if upto <= offered.accepted:
            return None
        if characters is not None and offered.accepted == 0:
            self.partially_accepted += 1
        start = offered.offset + offered.accepted
        accepted = Accepted(offered.uri, offered.text[offered.accepted : upto], start, start + upto - offered.accepted)
        offered.accepted = upto
        self.accepted_chars += len(accepted.text)
        self.tracked.append(accepted)
        return accepted

    def changed(self, uri: str, start: int, end: int, inserted: int) -> None:
        for accepted in self.tracked:
            if accepted.uri == uri:
                accepted.moved(start, end, inserted)

    def check(self, accepted: Accepted, which: int, document: str | None) -> None:
        """RETENTION_CHECKS_S[which] for `accepted`, in its document's text now (None: the
        document was closed, so nothing can be checked; the last check forgets it)."""
        if not any(other is accepted for other in self.tracked):
            return  # forgotten at an earlier check: its document was closed
        if document is not None:
            self.retention[which].checked += len(accepted.text)
            self.retention[which].retained += accepted.kept(document)
        if which == len(RETENTION_CHECKS_S) - 1 or document is None:
            self.tracked = [other for other in self.tracked if other is not accepted]


@dataclass
class OfferedEdit:
    """A next-edit suggestion returned to the editor."""

    uri: str
    after: str  # its document's text (line breaks "\n") with the suggestion's edits made
    accepted: bool = False


@dataclass
class EditAcceptances:
    """Next-edit suggestions offered, and the one shown in each document: which were
    accepted, by the command their edits carry (completer's plugins run it) or, for a
    client that runs none (Copilot's), by the document's next change after it was shown
    being the suggestion's edits. Each suggestion is accepted once, whichever comes first."""

    offered: OrderedDict[int, OfferedEdit] = field(default_factory=OrderedDict)  # suggestion id -> suggestion
    showing: dict[str, int] = field(default_factory=dict)  # document -> the suggestion shown there last

    def offer(self, suggestion: int, uri: str, after: str) -> None:
        self.offered[suggestion] = OfferedEdit(uri, after)
        if len(self.offered) > ITEMS_KEPT:
            forgotten, _ = self.offered.popitem(last=False)
            self.showing = {document: shown for document, shown in self.showing.items() if shown != forgotten}

    def shown(self, suggestion: int) -> None:
        offered = self.offered.get(suggestion)
        if offered is not None:
            self.showing[offered.uri] = suggestion

    def take(self, suggestion: int | None) -> bool:
        """The user accepted the suggestion: whether that is new (one the server no longer
        knows is, as the client says; one already accepted is not)."""
        offered = self.offered.get(suggestion) if suggestion is not None else None
        if offered is None:
            return True
        newly, offered.accepted = not offered.accepted, True
        return newly

    def changed(self, uri: str, text: str) -> bool:
        """The document is now `text`: whether that accepted the suggestion shown there
        (it is what the suggestion's edits make); that one is no longer shown either way."""
        suggestion = self.showing.pop(uri, None)
        offered = self.offered.get(suggestion) if suggestion is not None else None
        return offered is not None and offered.after == text and self.take(suggestion)

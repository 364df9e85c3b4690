"""Edit holes: next edits cut from a repository's own git history.

    commits = the history from HEAD back (at most MAX_COMMITS), commits with one parent,
              read with dulwich: a library that reads git's objects runs nothing of the
              repository's (git itself may run its configured programs: hooks,
              fsmonitor, diff drivers)
    a file a commit changed (a source file, text, under MAX_BYTES) whose changes are
              two or more hunks (line-level, no context) that all lie within a span
              the size of the editable region
    holes   = N of those, seeded: one hunk is the truth, the others are the user's
              edits, made in their order in the file; the cursor stands where the
              last of them changed the text, and the truth must lie in the editable
              region around it (else another hunk is tried, then another file)
    history = one edit event: the file before the commit, and with the user's edits
A hole is plain data (JSON), the file's text before the commit included: a run can be
replayed exactly from its holes, whatever the repository holds by then.
"""

import difflib
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from completer.bench.holes import LANGUAGES
from completer.editor.next_edit import EditEvent, apply_edits, editable_region
from completer.models.sources import MAX_BYTES
from completer.requests import TextEdit

# The newest commits looked at: history enough for 40 holes in the repositories measured
# (docs/bench-command.md), and a walk short enough to wait for.
MAX_COMMITS = 3000
# Candidates gathered before the walk stops, per hole asked: enough to pick from.
CANDIDATES_PER_HOLE = 4


@dataclass(frozen=True)
class EditHole:
    root: str  # the repository, absolute
    commit: str  # hex: the commit that made the edits
    file: str  # relative to root
    language: str  # the file's extension
    before: str  # the file in the commit's parent
    hunks: tuple[tuple[int, int, str], ...]  # the commit's changes: before[start:end] -> text, in order
    truth: int  # the hunk left for the model to predict
    kind = "edit"

    @property
    def user_edits(self) -> list[TextEdit]:
        return [TextEdit(*hunk) for i, hunk in enumerate(self.hunks) if i != self.truth]

    @property
    def document(self) -> str:
        """The file as the user has it: before, with every hunk but the truth made."""
        return apply_edits(self.before, self.user_edits)

    @property
    def cursor(self) -> int:
        """Where the user typed last: in the document, the end of what the last of the
        user's edits changed (a hunk is whole lines; the text after the change in its
        last line was there before)."""
        edits = self.user_edits
        last = edits[-1]
        old = self.before[last.start:last.end]
        kept = _common_suffix(old, last.text, min(len(old), len(last.text)) - _common_prefix(old, last.text))
        return _shifted(last.start, edits[:-1]) + len(last.text) - kept

    @property
    def truth_edit(self) -> TextEdit:
        """The truth hunk in the document's offsets."""
        start, end, text = self.hunks[self.truth]
        earlier = self.user_edits[:self.truth]
        return TextEdit(_shifted(start, earlier), _shifted(end, earlier), text)

    @property
    def after(self) -> str:
        """The file as the commit left it."""
        return apply_edits(self.before, [TextEdit(*hunk) for hunk in self.hunks])

    def history(self) -> list[EditEvent]:
        return [EditEvent(self.file, self.file, self.before, self.document)]

    def to_json(self) -> dict:
        return asdict(self)


def _common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def _common_suffix(a: str, b: str, most: int) -> int:
    return min(len(os.path.commonprefix([a[::-1], b[::-1]])), most)


def _shifted(offset: int, earlier: list[TextEdit]) -> int:
    """`offset` in the text before `earlier` (edits before it), in the text after them."""
    return offset + sum(len(edit.text) - (edit.end - edit.start) for edit in earlier)


def hunks(before: str, after: str) -> list[tuple[int, int, str]]:
    """The line-level changes that make `after` from `before`, without context:
    (start, end, new text) in `before`'s character offsets, in order."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    offsets = [0]
    for line in old:
        offsets.append(offsets[-1] + len(line))
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [(offsets[i1], offsets[i2], "".join(new[j1:j2]))
            for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def within_region(before: str, changes: list[tuple[int, int, str]], region_lines: int) -> bool:
    """Two or more changes, all within `region_lines` lines of the file before them."""
    if len(changes) < 2:
        return False
    first_line = before.count("\n", 0, changes[0][0])
    last_line = before.count("\n", 0, changes[-1][1])
    return last_line - first_line < region_lines


def hole_for(candidate: tuple[str, str, str, str, str], lines: tuple[int, int], rng: random.Random) -> EditHole | None:
    """A hole in one changed file, its truth a hunk (tried in a seeded order) that lies
    in the editable region around the cursor; None when no hunk does."""
    root, commit, file, before, after = candidate
    changes = tuple(hunks(before, after))
    order = list(range(len(changes)))
    rng.shuffle(order)
    for truth in order:
        hole = EditHole(root, commit, file, Path(file).suffix.lstrip("."), before, changes, truth)
        region = editable_region(hole.document, hole.cursor, *lines)
        edit = hole.truth_edit
        if region.start <= edit.start and edit.end <= region.end:
            return hole
    return None


def changed_files(root: Path, wanted: int, region_lines: int) -> list[tuple[str, str, str, str, str]]:
    """(root, commit, file, before, after) for files commits changed in a way holes can
    be cut from, newest first, until `wanted` of them or MAX_COMMITS commits."""
    from dulwich.errors import NotGitRepository
    from dulwich.repo import Repo

    try:
        repo = Repo(str(root))
    except NotGitRepository:
        raise ValueError(f"{root} is not a git repository: edit holes come from its history") from None
    found = []
    with repo:
        if repo.head() is None:
            return []
        for entry in repo.get_walker(max_entries=MAX_COMMITS):
            if len(entry.commit.parents) != 1:
                continue
            for change in entry.changes():
                if change.type != "modify" or Path(change.new.path.decode(errors="replace")).suffix[1:] not in \
                        LANGUAGES:
                    continue
                old, new = repo.object_store[change.old.sha].data, repo.object_store[change.new.sha].data
                if max(len(old), len(new)) > MAX_BYTES or b"\0" in old + new:
                    continue
                try:
                    before, after = old.decode("utf-8"), new.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if within_region(before, hunks(before, after), region_lines):
                    found.append((str(root), entry.commit.id.decode(), change.new.path.decode(), before, after))
            if len(found) >= wanted:
                break
    return found


def pick_edit_holes(roots: list[Path], count: int, seed: int, lines: tuple[int, int]) -> list[EditHole]:
    """`count` holes over the roots' histories (`lines`: the editable region's lines above
    and below the cursor), the same for the same seed and history."""
    rng = random.Random(seed)
    region_lines = lines[0] + lines[1] + 1
    candidates = [c for root in roots for c in changed_files(root.resolve(), count * CANDIDATES_PER_HOLE, region_lines)]
    if not candidates:
        raise ValueError(f"no commit in {', '.join(map(str, roots))} changes a source file in two or more places "
                         f"within {region_lines} lines: no edit holes to cut")
    rng.shuffle(candidates)
    holes = []
    for candidate in candidates:
        hole = hole_for(candidate, lines, rng)
        if hole is not None:
            holes.append(hole)
            if len(holes) == count:
                break
    return holes


def edit_holes_from_json(data: dict | list) -> list[EditHole]:
    """Edit holes from a bench report (its "holes") or a bare list."""
    holes = data["holes"] if isinstance(data, dict) else data
    return [EditHole(**{**hole, "hunks": tuple(tuple(h) for h in hole["hunks"])}) for hole in holes]

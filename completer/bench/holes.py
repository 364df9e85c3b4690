"""Holes: cursor positions in a repository's source files, with the text that was there.

    files  = the repository's files that .gitignore does not exclude (read without
             running git), less generated, vendored, binary, tiny and huge ones
    holes  = N, seeded: a language (weighted by the square root of its file count), a
             random file of it, then a hole of the next kind in turn:
               rest of line  a non-empty, non-comment line cut at a column in
                             [0, min(15, length)], as llm-ls's testbed; truth: the rest
               next line     the cursor at the end of a code line; truth: the next line
               block         the cursor at the end of a line opening a block (":" or "{");
                             truth: the lines indented deeper that follow it
    cross-file (--pick cross-file, after CrossCodeEval): candidates picked as above, the
             same seed, kept when the truth writes a cross-file identifier (below), until
             N are kept or PICK_TRIES per hole were tried
    cross-file identifier: a name the truth writes that the hole's own file does not
             define and reaches in another file of the repository through its imports,
             as CrossCodeEval takes the names a file imports from its repository:
               imported by name from the file that defines it (`convert_length(`),
               a member of a type so imported (`ctx.resilient_parsing`, Context imported),
               written after "." and defined at the top of a module the file imports
                   (`types.BOOL`), the module itself, not only its package
             The imports are read from the file without the hole's lines: a name the
             truth itself imports (`from .types import BOOL`) is not one, since nothing
             before the cursor says it will come
A hole is plain data (JSON): a run can be replayed exactly from its holes, the truth's
cross-file identifiers with them.
"""

import random
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from completer.config import DEFAULT_EXCLUDE
from completer.editor.definitions_context import IMPORTED, MEMBER, Reach, path_forms, rank_of
from completer.editor.postprocess import indentation
from completer.engine.definitions import Definition, Identifier, extract, identifiers, language_of
from completer.engine.definitions_index import DefinitionsIndex
from completer.models.sources import source_files
from completer.prompt import LINE_COMMENT
from completer.requests import cursor_offset
from completer.workspace import Workspace

# Languages holes go in: programming languages (LINE_COMMENT also knows config formats).
LANGUAGES = set(LINE_COMMENT) - {"toml", "yaml", "yml", "mk", "cmake"}
KINDS = ("rest of line", "next line", "block")
# Candidate holes tried per hole asked for: random picking keeps nearly every candidate;
# on 16 random holes of a held-out repository 3 wrote a cross-file identifier (issue 56).
PICK_TRIES = {"random": 20, "cross-file": 200}


@dataclass(frozen=True)
class Hole:
    root: str  # the repository, absolute
    file: str  # relative to root
    language: str  # the file's extension
    kind: str
    line: int  # 0-based
    column: int  # characters
    truth: str  # what the file had from the cursor on, for the kind
    # The truth's identifiers that another file of the repository defines and this one does not.
    cross_file: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return Path(self.root) / self.file

    def to_json(self) -> dict:
        return asdict(self)


def is_code(line: str, language: str) -> bool:
    """A line with code on it (4+ characters, not a lone bracket): not blank, not a
    comment, not a docstring line."""
    stripped = line.strip()
    return len(stripped) >= 4 and not stripped.startswith((LINE_COMMENT[language], '"""', "'''", "/*", "*", "#"))


def _block_truth(lines: list[str], opener: int) -> str:
    """The lines after `opener` indented deeper than it (blank lines inside kept)."""
    body = []
    for line in lines[opener + 1 :]:
        if line.strip() and indentation(line) <= indentation(lines[opener]):
            break
        body.append(line)
    return "\n" + "\n".join(body).rstrip()


def candidates(lines: list[str], language: str, kind: str) -> list[int]:
    """Lines where a hole of `kind` can go."""
    code = [i for i, line in enumerate(lines) if is_code(line, language)]
    if kind == "rest of line":
        return code
    if kind == "next line":
        return [i for i in code if i + 1 < len(lines) and is_code(lines[i + 1], language)]
    return [i for i in code if lines[i].rstrip().endswith((":", "{")) and _block_truth(lines, i).strip()]


def make_hole(root: Path, path: Path, language: str, kind: str, rng: random.Random) -> Hole | None:
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    places = candidates(lines, language, kind)
    if not places:
        return None
    line = rng.choice(places)
    text = lines[line]
    if kind == "rest of line":
        column = rng.randint(0, min(15, len(text) - 1))
        truth = text[column:]
    elif kind == "next line":
        column, truth = len(text), "\n" + lines[line + 1]
    else:
        column, truth = len(text), _block_truth(lines, line)
    return Hole(str(root), path.relative_to(root).as_posix(), language, kind, line, column, truth)


def pick_holes(roots: list[Path], count: int, seed: int,
               keep: Callable[[Path], bool] = lambda path: True) -> list[Hole]:
    """`count` holes over the roots' source files (those `keep` accepts), the same for
    the same seed and files."""
    return pick(roots, count, seed, keep)[0]


def pick(roots: list[Path], count: int, seed: int, keep: Callable[[Path], bool] = lambda path: True,
         qualify: Callable[[Hole], Hole | None] = lambda hole: hole, tries: int = PICK_TRIES["random"]
         ) -> tuple[list[Hole], int]:
    """Up to `count` holes that `qualify` keeps (as it returns them) of candidates picked
    by the seed, at most `count * tries` candidates; and how many candidates were tried."""
    rng = random.Random(seed)
    files = [(root.resolve(), language, path) for root in roots
             for language, paths in sorted(source_files(root.resolve(), LANGUAGES, exclude=DEFAULT_EXCLUDE).items())
             for path in paths if keep(path)]
    languages = sorted({language for _, language, _ in files})
    if not languages:
        raise ValueError(f"no source files to complete in under {', '.join(map(str, roots))}")
    # Each language weighs the square root of its file count: a mostly-Python repository
    # gets mostly Python holes, and its few shell scripts still get some.
    weights = [len([f for f in files if f[1] == language]) ** 0.5 for language in languages]
    holes: list[Hole] = []
    attempts = 0
    while len(holes) < count and attempts < count * tries:
        language = rng.choices(languages, weights)[0]
        kind = KINDS[len(holes) % len(KINDS)]
        attempts += 1
        root, _, path = rng.choice([f for f in files if f[1] == language])
        hole = make_hole(root, path, language, kind, rng)
        kept = qualify(hole) if hole is not None and hole not in holes else None
        if kept is not None:
            holes.append(kept)
    return holes, attempts


def written_names(before: str, text: str, after: str, language: str) -> list[str]:
    """The identifiers `text` writes, in order, in the file `before` + `text` + `after` (a
    string or comment it continues holds none); one the cursor stands inside counts
    whole. `language`: a file extension."""
    return [found.name for found in written_identifiers(before, text, after, language)]


def written_identifiers(before: str, text: str, after: str, language: str) -> list[Identifier]:
    start = len(before.encode("utf-8"))  # identifiers' ends are UTF-8 byte offsets
    end = start + len(text.encode("utf-8"))
    return [found for found in identifiers(before + text + after, language_of("", language))
            if start < found.end <= end]


def reached(written: Identifier, definition: Definition, reach: Reach) -> bool:
    """Whether the hole's file reaches this definition of a name it writes through its
    imports (the module docstring's three ways)."""
    rank = rank_of(definition, written.name, reach)
    if not written.member:
        return rank == IMPORTED
    return rank == MEMBER or not definition.container and imports_module(definition.path, reach)


def imports_module(path: str, reach: Reach) -> bool:
    """Whether the file imports the module that is this file (`import pkg.units`, `from pkg
    import units`, `from .units import x`): the module itself, not merely its package."""
    module = path_forms(path)[0]
    for imported, (parts, whole) in reach.modules:
        for named in (parts, (*parts, imported.name) if imported.name else ()):
            if named and (module == named if whole else module[-len(named[-2:]):] == named[-2:]):
                return True
    return False


def cross_file_names(written: Iterable[Identifier], defined_here: set[str], reach: Reach,
                     lookup: Callable[[str], list[Definition]]) -> tuple[str, ...]:
    """The cross-file identifiers among those written (see the module's docstring), each
    once, in order. `lookup(name)`: its definitions in the repository's other files."""
    return tuple(dict.fromkeys(
        each.name for each in written
        if each.name not in defined_here and any(reached(each, definition, reach) for definition in lookup(each.name))))


class CrossFile:
    """The cross-file identifiers of holes in the roots: by the roots' definitions index
    (the editor's: the workspace index's walker and rules), built once."""

    def __init__(self, roots: list[Path]):
        self.index = DefinitionsIndex(Workspace([root.resolve() for root in roots]))
        self.index.build()
        self.defined: dict[Path, set[str]] = {}  # a hole's file -> the names it defines

    def names(self, hole: Hole) -> tuple[str, ...]:
        """The hole's cross-file identifiers (see the module's docstring)."""
        text = hole.path.read_text(encoding="utf-8", errors="replace")
        if hole.path not in self.defined:
            self.defined[hole.path] = {d.name for d in extract(str(hole.path), text, hole.language).definitions}
        root = Path(hole.root).resolve()
        cursor = cursor_offset(text, hole.line, hole.column)
        after = text[cursor + len(hole.truth):]
        written = written_identifiers(text[:cursor], hole.truth, after, hole.language)
        without_hole = text[:text.rfind("\n", 0, cursor) + 1] + after
        imports = extract(str(hole.path), without_hole, hole.language).imports
        reach = Reach.of(str(hole.path.resolve()), imports, (imported.name for imported in imports if imported.name))
        return cross_file_names(written, self.defined[hole.path], reach,
                                lambda name: [d for d in self.index.lookup(name, outside=hole.path)
                                              if Path(d.path).is_relative_to(root)])

    def qualified(self, hole: Hole) -> Hole | None:
        """The hole with its cross-file identifiers; None when it has none."""
        names = self.names(hole)
        return replace(hole, cross_file=names) if names else None

    def annotated(self, hole: Hole) -> Hole:
        return replace(hole, cross_file=self.names(hole))


def pick_by(rule: str, roots: list[Path], count: int, seed: int) -> tuple[list[Hole], int]:
    """`count` holes by the rule of bench.PICKS, each with its cross-file identifiers, and how
    many candidates were tried: "random" takes every candidate, "cross-file" those with one."""
    cross_file = CrossFile(roots)
    if rule == "cross-file":
        return pick(roots, count, seed, qualify=cross_file.qualified, tries=PICK_TRIES[rule])
    holes, tried = pick(roots, count, seed)
    return [cross_file.annotated(hole) for hole in holes], tried


def holes_from_json(data: dict | list) -> list[Hole]:
    """Holes from a bench report (its "holes") or a bare list."""
    return [Hole(**{**hole, "cross_file": tuple(hole.get("cross_file", ()))})
            for hole in (data["holes"] if isinstance(data, dict) else data)]

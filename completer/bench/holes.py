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
A hole is plain data (JSON): a run can be replayed exactly from its holes.
"""

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from completer.editor.postprocess import indentation
from completer.config import DEFAULT_EXCLUDE
from completer.models.sources import source_files
from completer.prompt import LINE_COMMENT

# Languages holes go in: programming languages (LINE_COMMENT also knows config formats).
LANGUAGES = set(LINE_COMMENT) - {"toml", "yaml", "yml", "mk", "cmake"}
KINDS = ("rest of line", "next line", "block")
@dataclass(frozen=True)
class Hole:
    root: str  # the repository, absolute
    file: str  # relative to root
    language: str  # the file's extension
    kind: str
    line: int  # 0-based
    column: int  # characters
    truth: str  # what the file had from the cursor on, for the kind

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
    while len(holes) < count and attempts < count * 20:
        language = rng.choices(languages, weights)[0]
        kind = KINDS[len(holes) % len(KINDS)]
        attempts += 1
        root, _, path = rng.choice([f for f in files if f[1] == language])
        hole = make_hole(root, path, language, kind, rng)
        if hole is not None and hole not in holes:
            holes.append(hole)
    return holes


def holes_from_json(data: dict | list) -> list[Hole]:
    """Holes from a bench report (its "holes") or a bare list."""
    return [Hole(**hole) for hole in (data["holes"] if isinstance(data, dict) else data)]

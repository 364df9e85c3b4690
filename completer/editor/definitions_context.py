"""Definitions at the cursor: the other files' definitions a completion likely calls, as
short snippets for the prompt's context files, within a token budget.

    names     the identifiers in the cursor's statement and the NEAR_LINES lines before it
              (read from tree-sitter's tree of those lines), nearest the cursor first, an
              import's alias read as the name it imports; then the names the file imports
    ranked    each name's definitions outside this file (a lookup: DefinitionsIndex.lookup),
              names at the cursor before those only imported; then
                  imported by name from the file that defines it,
                  a member of a type named at the cursor or imported (the receiver's type,
                      as far as the names tell: `c = Client(); c.send(`),
                  defined in a module the file imports,
                  merely named the same: only for a name at the cursor defined in at most
                      SAME_NAMED_MOST places, and a method or field only for a name
                      written after a "."
              then nearer the cursor, then nearer this file in the folder tree
    chosen    in that order while they fit the budget (less any a chosen one shows whole),
              then sorted by file and line: the block changes only when the set of
              snippets does, so typing that finds no new definition keeps the prompt's KV
              cache

The identifier the cursor is at the end of is left out: it is being typed, and every
keystroke would look up another prefix.
"""

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath
from typing import NamedTuple

from completer.engine.definitions import (
    LANGUAGES,
    Definition,
    Import,
    identifiers,
    language_of,
)
from completer.prompt import LINE_COMMENT, ContextFile

NEAR_LINES = 8  # lines before the cursor's read for names: a call's arguments span a few
SAME_NAMED_MOST = 3  # places a name is defined in, at most, for a guess by the name alone
# Rank of a definition by how it is reached from the cursor's file.
IMPORTED, MEMBER, IN_IMPORTED_MODULE, SAME_NAMED = 0, 1, 2, 3
REASONS = {IMPORTED: "imported", MEMBER: "a member of a type named here", IN_IMPORTED_MODULE: "in an imported module",
           SAME_NAMED: "same name"}
# File names that stand for their folder: `import pkg` is pkg/__init__.py, `mod a` a/mod.rs.
PACKAGE_FILES = {"__init__", "mod", "index"}


@dataclass(frozen=True)
class Snippet:
    definition: Definition
    text: str
    reason: str  # why it was taken: one of REASONS' values
    near: bool  # its name is in the lines at the cursor


class Wanted(NamedTuple):
    names: list[str]  # nearest the cursor first, then the file's imported names
    near: int  # how many of them (the first) are in the lines at the cursor
    members: frozenset[str]  # those written after a "." (a method or a field may be meant)


def wanted_names(before: str, language: str | None, imports: Iterable[Import]) -> Wanted:
    """The names to look up (see the module's docstring)."""
    near_text = "\n".join(before.split("\n")[-NEAR_LINES:])
    end = len(near_text.encode("utf-8", "replace"))
    written = [each for each in identifiers(near_text, language_of("", language)) if each.end != end]
    aliases = {imported.alias: imported.name for imported in imports if imported.alias and imported.name}
    near = list(dict.fromkeys(aliases.get(each.name, each.name) for each in reversed(written)))
    imported = [imported.name for imported in imports if imported.name and imported.name not in near]
    members = frozenset(each.name for each in written if each.member)
    return Wanted(near + list(dict.fromkeys(imported)), len(near), members)


def module_path(module: str, importer: str) -> tuple[tuple[str, ...], bool]:
    """The path parts (no extension) a module names, and whether they are the whole path
    (a relative import, resolved from the importer's folder) or its end."""
    folder = PurePosixPath(importer).parent
    if module.startswith(("./", "../")):  # JavaScript, TypeScript
        target = PurePosixPath(folder, module)
        resolved: list[str] = []
        for part in target.parts:
            resolved = resolved[:-1] if part == ".." else resolved if part == "." else [*resolved, part]
        return strip_extension(tuple(resolved)), True
    if module.startswith("."):  # Python: one dot is this package, each more one up
        dots = len(module) - len(module.lstrip("."))
        base = folder.parents[dots - 2] if dots > 1 and dots - 2 < len(folder.parents) else folder
        return tuple(base.parts) + tuple(part for part in module.lstrip(".").split(".") if part), True
    if "::" in module:  # Rust
        return tuple(part for part in module.split("::") if part not in ("crate", "self", "super")), False
    if "/" in module:  # Go, C
        parts = tuple(module.split("/"))
        if "." in parts[0]:  # a Go import path: host/owner/repository, then the folder in it
            parts = parts[3:]
        return strip_extension(parts), False
    if PurePath(module).suffix.lstrip(".") in LANGUAGES:  # C's "shapes.h"
        return strip_extension((module,)), False
    return tuple(module.split(".")), False


def strip_extension(parts: tuple[str, ...]) -> tuple[str, ...]:
    if parts and PurePath(parts[-1]).suffix.lstrip(".").lower() in LANGUAGES:
        return (*parts[:-1], PurePath(parts[-1]).stem)
    return parts


@functools.lru_cache(maxsize=16_384)
def path_forms(path: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A file's path as a module (no extension; a package's __init__, mod or index file
    its folder) and its folder's: cached, every ranking asks them of the same files."""
    posix = PurePosixPath(path)
    folder = posix.parent.parts
    return (folder if posix.stem in PACKAGE_FILES else (*folder, posix.stem)), folder


def names_file(definition_path: str, module: tuple[tuple[str, ...], bool]) -> bool:
    """Whether the file is the module (or in the package) of `module_path`'s answer. A
    module that is not relative is matched by its last two parts: a Go module's path or
    a Java package's names the repository's folders only at its end."""
    parts, whole = module
    if not parts:
        return False
    tail = parts[-2:]
    return any(candidate == parts if whole else candidate[-len(tail):] == tail
               for candidate in path_forms(definition_path))


def defines_module(definition_path: str, module: str, importer: str) -> bool:
    """Whether the definition's file is the module (or in the package) an import names."""
    return names_file(definition_path, module_path(module, importer))


class Reach(NamedTuple):
    """What the cursor's file reaches: each import with its module's path parts, the file's
    path, the names wanted at the cursor."""

    modules: tuple[tuple[Import, tuple[tuple[str, ...], bool]], ...]
    importer: str
    types: frozenset[str]

    @classmethod
    def of(cls, importer: str, imports: Iterable[Import], names: Iterable[str]) -> "Reach":
        modules = tuple((imported, module_path(imported.module, importer)) for imported in imports)
        return cls(modules, importer, frozenset(names))


def rank_of(definition: Definition, name: str, reach: Reach) -> int:
    """How the definition is reached from the cursor's file (a member of a type named at
    the cursor is likely the receiver's)."""
    matching = [imported for imported, module in reach.modules if names_file(definition.path, module)]
    if any(imported.name == name for imported in matching):
        return IMPORTED
    if definition.container and definition.container in reach.types:
        return MEMBER
    return IN_IMPORTED_MODULE if matching else SAME_NAMED


def folder_distance(a: str, b: str) -> int:
    """Folders between two files: up from one to where they share, then down to the other."""
    parts_a, parts_b = path_forms(a)[1], path_forms(b)[1]
    shared = next((i for i, (x, y) in enumerate(zip(parts_a, parts_b)) if x != y), min(len(parts_a), len(parts_b)))
    return len(parts_a) + len(parts_b) - 2 * shared


def ranked(path: str, before: str, imports: tuple[Import, ...], lookup: Callable[[str], list[Definition]],
           language: str | None = None) -> list[Snippet]:
    """The definitions the cursor likely needs, best first (see the module's docstring).
    `lookup(name)`: the definitions of that name outside this file."""
    names, near_count, members = wanted_names(before, language or language_of(path), imports)
    reach = Reach.of(path, imports, names)
    best: dict[tuple[str, int], tuple[tuple, Snippet]] = {}  # (path, line) -> its best key, its snippet
    for order, name in enumerate(names):
        near = order < near_count
        for rank, definition in candidates(name, near, name in members, reach, lookup):
            place = place_of(definition)
            key = (not near, rank, order, folder_distance(path, definition.path), *place)
            if place not in best or key < best[place][0]:
                best[place] = key, Snippet(definition, snippet_text(definition), REASONS[rank], near)
    return [snippet for _, snippet in sorted(best.values(), key=lambda item: item[0])]


def candidates(name: str, near: bool, member: bool, reach: Reach,
               lookup: Callable[[str], list[Definition]]) -> list[tuple[int, Definition]]:
    """A name's definitions with their ranks: every one an import or a type reaches; those
    merely named the same only for a name at the cursor (a method or field only for a name
    written after a "."), and only when there are at most SAME_NAMED_MOST of them (a name
    defined all over, `parse` or `run`, says too little)."""
    found = [(rank_of(definition, name, reach), definition) for definition in lookup(name)]
    reached = [item for item in found if item[0] != SAME_NAMED]
    same_named = [item for item in found if item[0] == SAME_NAMED and (member or not item[1].container)]
    if not near or len(same_named) > SAME_NAMED_MOST:
        return reached
    return reached + sorted(same_named, key=lambda item: (folder_distance(reach.importer, item[1].path),
                                                          *place_of(item[1])))


def place_of(definition: Definition) -> tuple[str, int]:
    return definition.path, definition.start_line


def snippet_text(definition: Definition) -> str:
    """The whole definition when it was small (or a class's outline), else its signature
    and docstring line."""
    if definition.text:
        return definition.text
    if not definition.doc:
        return definition.signature
    if definition.signature.endswith(":"):  # Python
        return f'{definition.signature}\n    """{definition.doc}"""\n    ...'
    comment = LINE_COMMENT.get(PurePath(definition.path).suffix.lstrip(".").lower(), "#")
    return f"{comment} {definition.doc}\n{definition.signature}"


def fit(snippets: list[Snippet], count_tokens: Callable[[str], int], budget: int,
        show_path: Callable[[str], str] = str) -> list[Snippet]:
    """The snippets taken in rank order while they fit `budget` tokens (each snippet, and
    each file's name line once), less those another taken one shows, sorted by file and line."""
    taken: list[Snippet] = []
    files: set[str] = set()
    spent = 0
    for snippet in snippets:
        path = snippet.definition.path
        if any(other.definition.path == path and shows(other.text, snippet.text) for other in taken):
            continue  # a method shown whole in its class's snippet
        cost = count_tokens(snippet.text + "\n\n") + (0 if path in files else count_tokens(show_path(path) + "\n"))
        if spent + cost <= budget:
            taken.append(snippet)
            files.add(path)
            spent += cost
    return sorted(taken, key=lambda snippet: place_of(snippet.definition))


def shows(text: str, part: str) -> bool:
    """Whether `text` holds `part`, whatever their indentation: a method's snippet is
    dedented, its class's is not."""
    return " ".join(part.split()) in " ".join(text.split())


def context_files(snippets: list[Snippet], show_path: Callable[[str], str] = str) -> tuple[ContextFile, ...]:
    """One context file per file, its snippets in line order (as `fit` sorts them), saying
    of each what it defines, where, and why it was taken."""
    by_path: dict[str, list[Snippet]] = {}
    for snippet in snippets:
        by_path.setdefault(snippet.definition.path, []).append(snippet)
    return tuple(ContextFile(show_path(path), "\n\n".join(snippet.text for snippet in taken),
                             "; ".join(reason_of(snippet) for snippet in taken))
                 for path, taken in by_path.items())


def reason_of(snippet: Snippet) -> str:
    """`Client.send` line 12: imported."""
    definition = snippet.definition
    name = f"{definition.container}.{definition.name}" if definition.container else definition.name
    return f"{name} line {definition.start_line}: {snippet.reason}"

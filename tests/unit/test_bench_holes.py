"""The bench's cross-file holes (issue 56, after CrossCodeEval): which holes qualify, the
identifiers recorded with them, identifier match, and the context each --with-context gives."""

import json

import pytest

from completer.bench.command import context_config
from completer.bench.holes import (CrossFile, Hole, cross_file_names, holes_from_json, pick, pick_by, pick_holes,
                                   written_names)
from completer.bench.metrics import cross_file_written, identifier_match
from completer.config import ContextOptions, PromptOptions
from completer.editor.definitions_context import Reach
from completer.engine.definitions import Definition, Identifier, Import

UNITS = '''"""Units the app converts with."""

MAX_STALENESS_S = 30


def convert_length(value, factor=3):
    """A length in another unit."""
    return value * factor


def shared_name():
    return 1
'''

# A hole file over sources.MIN_BYTES: each function calls convert_length (defined in
# units.py alone), and defines shared_name, which units.py defines too.
APP = "from pkg.units import MAX_STALENESS_S, convert_length\n\n\n" + "\n\n".join(
    f"def measure_{i}(total):\n"
    f"    local_{i} = total + {i}\n"
    f"    scaled = convert_length(local_{i}, factor={i})\n"
    f"    return scaled + MAX_STALENESS_S\n" for i in range(12)) + (
    "\n\ndef shared_name():\n    return 2\n\n\ndef uses_shared():\n    return shared_name()\n")


@pytest.fixture
def repository(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "units.py").write_text(UNITS)
    (root / "pkg" / "app.py").write_text(APP)
    return root


def hole_at(root, needle: str, kind: str = "rest of line") -> Hole:
    """The hole whose cursor stands before `needle`'s first occurrence in app.py, its truth the rest of the line."""
    text = (root / "pkg" / "app.py").read_text()
    offset = text.index(needle)
    line = text.count("\n", 0, offset)
    column = offset - (text.rfind("\n", 0, offset) + 1)
    truth = text[offset:text.index("\n", offset)]
    return Hole(str(root.resolve()), "pkg/app.py", "py", kind, line, column, truth)


def test_a_name_qualifies_when_the_file_reaches_it_in_another_file_through_its_imports_and_does_not_define_it():
    def defined(name: str, path: str, container: str = "") -> Definition:
        return Definition(name, "function", f"def {name}():", "", path, 1, 2, container)

    elsewhere = {"convert_length": [defined("convert_length", "/r/pkg/units.py")],
                 "shared_name": [defined("shared_name", "/r/pkg/units.py")],
                 "scale": [defined("scale", "/r/pkg/units.py", container="Meter")],
                 "MAX_STALENESS_S": [defined("MAX_STALENESS_S", "/r/pkg/units.py")],
                 "helper": [defined("helper", "/r/pkg/units.py"), defined("helper", "/r/pkg/tools.py")],
                 "ctx": [defined("ctx", "/r/pkg/other.py")]}
    imports = (Import("pkg.units", "convert_length"), Import("pkg.units", "shared_name"), Import("pkg.units", "Meter"),
               Import(".units", "MAX_STALENESS_S"), Import("pkg", "units"))
    reach = Reach.of("/r/pkg/app.py", imports, ("convert_length", "shared_name", "Meter", "MAX_STALENESS_S"))

    def cross(*written: tuple[str, bool]) -> tuple[str, ...]:
        return cross_file_names([Identifier(name, 0, member) for name, member in written], {"shared_name"}, reach,
                                lambda name: elsewhere.get(name, []))

    # Imported by name, each once, in order; defined here too, or a local name: not.
    assert cross(("scaled", False), ("convert_length", False), ("shared_name", False), ("convert_length", False),
                 ("MAX_STALENESS_S", False)) == ("convert_length", "MAX_STALENESS_S")
    # A member of an imported type, written after "."; the same name written bare is not reached so.
    assert cross(("m", False), ("scale", True)) == ("scale",)
    assert cross(("scale", False)) == ()
    # After "." from a module the file imports (`units.helper`); not bare, and not a name
    # some other file defines that no import reaches (`ctx`).
    assert cross(("units", False), ("helper", True)) == ("helper",)
    assert cross(("helper", False), ("ctx", False), ("ctx", True)) == ()


def test_the_names_a_text_writes_are_its_identifiers_set_in_the_file():
    # The one the cursor stands inside counts whole; those before the cursor do not.
    assert written_names("x = conv", "ert_length(y, factor=2)", "\n", "py") == ["convert_length", "y", "factor"]
    # A string or a comment continued holds no identifier, as the file closes it after.
    assert written_names('s = """a ', 'convert_length b', '"""\n', "py") == []
    assert written_names("# see ", "convert_length here", "\nx = 1\n", "py") == []
    assert written_names("x = ", "convert_length", "", "unknown-language") == []


def test_a_hole_of_the_repository_has_the_cross_file_identifiers_its_truth_writes(repository):
    cross_file = CrossFile([repository])
    calling = hole_at(repository, "scaled = convert_length(local_3")
    assert cross_file.names(calling) == ("convert_length",)
    assert cross_file.qualified(calling).cross_file == ("convert_length",)
    assert cross_file.names(hole_at(repository, "return scaled + MAX")) == ("MAX_STALENESS_S",)
    # Defined in units.py and in app.py itself; and a local name: neither qualifies.
    assert cross_file.qualified(hole_at(repository, "shared_name()\n")) is None
    assert cross_file.names(hole_at(repository, "local_5 = total")) == ()
    # The import line itself: nothing before the cursor says what it will import.
    assert cross_file.names(hole_at(repository, "MAX_STALENESS_S, convert_length\n")) == ()


def test_cross_file_picking_keeps_only_qualifying_candidates_by_the_seed_and_says_how_many_it_tried(repository):
    holes, tried = pick_by("cross-file", [repository], 4, seed=3)
    assert len(holes) == 4 and tried >= 4
    assert all(hole.cross_file and set(hole.cross_file) <= {"convert_length", "MAX_STALENESS_S"} for hole in holes)
    assert (holes, tried) == pick_by("cross-file", [repository], 4, seed=3)
    # Random picking is today's: the same holes for the seed, each with its cross-file identifiers recorded.
    random_holes, _ = pick_by("random", [repository], 4, seed=3)
    assert random_holes == [CrossFile([repository]).annotated(hole) for hole in pick_holes([repository], 4, seed=3)]
    # Candidates run out: what qualified is kept, and the tries are said.
    none_qualify, tried = pick([repository], 3, seed=3, qualify=lambda hole: None, tries=5)
    assert none_qualify == [] and tried == 15


def test_holes_replay_with_their_cross_file_identifiers_and_old_reports_still_load(repository):
    holes, _ = pick_by("cross-file", [repository], 2, seed=1)
    report = json.loads(json.dumps({"holes": [hole.to_json() for hole in holes]}))
    assert holes_from_json(report) == holes
    old = [{k: v for k, v in hole.items() if k != "cross_file"} for hole in report["holes"]]
    assert [hole.cross_file for hole in holes_from_json(old)] == [(), ()]


def test_a_completion_writes_a_cross_file_name_only_as_that_identifier_where_its_hole_is_judged():
    names = ("convert_length", "MAX_STALENESS_S")
    before, after = "def f(x):\n    y = ", "\n    return y\n"
    assert cross_file_written(names, before, "convert_length(x) + MAX_STALENESS_S", after, "rest of line",
                              "py") == list(names)
    assert cross_file_written(names, before, "convert_lengths(x)", after, "rest of line", "py") == []
    assert cross_file_written(names, before, '"convert_length"', after, "rest of line", "py") == []
    # A line hole is judged on its first non-empty line, a block on all of it.
    assert cross_file_written(names, before, "x\n    z = convert_length(x)", after, "rest of line", "py") == []
    assert cross_file_written(names, before, "x\n    z = convert_length(x)", after, "block", "py") == [
        "convert_length"]
    assert cross_file_written((), before, "convert_length(x)", after, "rest of line", "py") == []


def test_identifier_match_is_the_mean_share_over_the_holes_with_cross_file_identifiers():
    records = [{"cross_file": ["a", "b"], "cross_file_written": ["a"]},
               {"cross_file": ["c"], "cross_file_written": ["c"]},
               {"cross_file": [], "cross_file_written": []}]
    assert identifier_match(records) == pytest.approx((0.5 + 1.0) / 2)
    assert identifier_match(records[2:]) is None and identifier_match([]) is None


def test_each_with_context_shows_what_it_says_and_the_rest_is_the_products_default():
    assert context_config("none") == (ContextOptions(definitions_tokens=0), PromptOptions(cross_file_tokens=0))
    assert context_config("ring") == (ContextOptions(definitions_tokens=0), PromptOptions())
    assert context_config("definitions") == (ContextOptions(), PromptOptions(cross_file_tokens=0))

"""No module of ours takes a standard library module's name: run as a script (or with its
folder on sys.path), `benchmarks/typing.py` would be what `import typing` finds."""

import sys

from conftest import REPO


def test_no_module_is_named_as_a_standard_library_module():
    ours = [path for folder in ("completer", "models", "lsp", "benchmarks", "tests", "examples")
            for path in (REPO / folder).rglob("*.py")]
    assert ours
    assert [str(path.relative_to(REPO)) for path in ours if path.stem in sys.stdlib_module_names] == []

"""`completer bench --edits`: next edits cut from a repository's git history (read with a
library, never by running git), and a tiny real run through the CLI."""

import json

import pytest
from dulwich import porcelain
from hypothesis import given
from hypothesis import strategies as st

from completer.bench.edit_holes import EditHole, edit_holes_from_json, hunks, pick_edit_holes
from completer.editor.next_edit import FORMATS, InstructionFormat, apply_edits, editable_region, suggested_rewrite
from completer.requests import TextEdit
from conftest import run_completer

pytestmark = pytest.mark.slow  # minutes of real model passes: the full suite's, not the fast tier's

LINES = (8, 12)  # the editable region's lines above and below the cursor: edits.* defaults

BEFORE = "".join(f"def f{i}(width, height):\n    return width * height + {i}\n\n\n" for i in range(12))
# Two changes four lines apart: a next-edit hole, either way round.
NEAR = BEFORE.replace("def f3(width,", "def f3(w,").replace("def f4(width,", "def f4(w,")
# One change alone, and two changes 40 lines apart: no hole.
ALONE = NEAR.replace("+ 0\n", "+ 100\n")
FAR = ALONE.replace("+ 1\n", "+ 101\n").replace("+ 11\n", "+ 111\n")


def commit(root, files: dict[str, str | bytes], message: str) -> None:
    for name, text in files.items():
        path = root / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        porcelain.add(str(root), [str(path)])
    porcelain.commit(str(root), message=message.encode(), author=b"A <a@example.com>",
                     committer=b"A <a@example.com>")


@pytest.fixture
def history(tmp_path):
    """A repository whose history has one commit a hole can be cut from (shapes.py, two
    changes within a region) among others that cannot: its first, a one-change commit,
    changes far apart, a text file of no programming language, a binary file."""
    root = tmp_path / "repo"
    root.mkdir()
    porcelain.init(str(root))
    commit(root, {"shapes.py": BEFORE, "notes.txt": BEFORE, "data.py": b"x = 1\n\0\0" * 50}, "first")
    commit(root, {"shapes.py": NEAR, "notes.txt": NEAR, "data.py": b"x = 2\n\0\0" * 50}, "rename two parameters")
    commit(root, {"shapes.py": ALONE}, "one change")
    commit(root, {"shapes.py": FAR}, "two changes far apart")
    return root


@given(st.lists(st.sampled_from(["a\n", "b\n", "c\n", "\n", "d"]), max_size=12),
       st.lists(st.sampled_from(["a\n", "b\n", "x\n", "\n", "d"]), max_size=12))
def test_hunks_make_the_new_text_from_the_old(old, new):
    before, after = "".join(old), "".join(new)
    assert apply_edits(before, [TextEdit(*hunk) for hunk in hunks(before, after)]) == after


def test_holes_are_the_commits_near_changes_one_left_to_predict(history):
    holes = pick_edit_holes([history], 10, seed=1, lines=LINES)
    assert holes == pick_edit_holes([history], 10, seed=1, lines=LINES)  # the same for a seed
    assert len(holes) == 1  # the one commit with two changes near each other, in a source file
    hole = holes[0]
    assert (hole.file, hole.before, hole.after, len(hole.hunks)) == ("shapes.py", BEFORE, NEAR, 2)
    made, left = ("def f4(w,", "def f3(w,") if hole.truth == 0 else ("def f3(w,", "def f4(w,")
    # The user made the other change: the document has it, and not the one to predict.
    assert made in hole.document and left not in hole.document
    assert hole.document.count("(w,") == 1 and apply_edits(hole.document, [hole.truth_edit]) == NEAR
    # The cursor stands where the user's change ends, and the truth lies in the region around it.
    assert hole.document[:hole.cursor].endswith(made[:-1])
    region = editable_region(hole.document, hole.cursor, *LINES)
    assert region.start <= hole.truth_edit.start <= hole.truth_edit.end <= region.end
    assert hole.history()[0].before == BEFORE and hole.history()[0].after == hole.document
    assert edit_holes_from_json(json.loads(json.dumps({"holes": [hole.to_json()]}))) == holes


def test_the_later_change_left_to_predict_has_the_cursor_after_the_earlier_one():
    hole = EditHole("/r", "0" * 40, "shapes.py", "py", BEFORE, tuple(hunks(BEFORE, NEAR)), truth=1)
    assert hole.document == BEFORE.replace("def f3(width,", "def f3(w,")
    assert hole.document[:hole.cursor].endswith("def f3(w")
    assert hole.truth_edit.start == hole.document.index("def f4(width,")
    assert apply_edits(hole.document, [hole.truth_edit]) == NEAR


def test_a_folder_that_is_no_repository_is_a_clear_usage_error(tmp_path):
    with pytest.raises(ValueError, match="not a git repository"):
        pick_edit_holes([tmp_path], 2, seed=1, lines=LINES)
    result = run_completer("bench", "--edits", str(tmp_path), "--preset", "smol")
    assert result.returncode == 2 and "not a git repository" in result.stderr


def test_a_history_without_near_changes_is_a_clear_usage_error(tmp_path):
    porcelain.init(str(tmp_path))
    commit(tmp_path, {"shapes.py": BEFORE}, "first")
    commit(tmp_path, {"shapes.py": BEFORE.replace("+ 0\n", "+ 100\n")}, "one change")
    with pytest.raises(ValueError, match="two or more places"):
        pick_edit_holes([tmp_path], 2, seed=1, lines=LINES)


def test_a_suggestion_is_the_rewrite_up_to_where_it_ends_and_none_without_it():
    instruction: InstructionFormat = FORMATS["instruction"]
    ends = (instruction.CLOSE, instruction.OPEN)

    def suggestion(output: str, ended: bool, region: str) -> str | None:
        return suggested_rewrite(instruction, output, False, ended, ends, region)
    assert suggestion("a = 1\n</region>\nmore", False, "a = 0\n") == "a = 1\n"
    assert suggestion("a = 1\n<region>\nb", False, "a = 0\n") == "a = 1\n"
    assert suggestion("a = 1\nb = 2", False, "a = 0\n") is None  # cut by the budget: not shown
    assert suggestion("a = 1\nb = 2", True, "a = 0\n") is None  # ended without its tag
    assert suggestion("\n</region>", False, "a = 0\n") is None  # the region emptied: no edit
    assert suggestion("\n</region>", False, "\n") == "\n"  # a blank region written again
    sweep = FORMATS["sweep"]
    ends = sweep.prompt("a.py", "", editable_region("a = 0\n", 0, 0, 0), "", []).ends
    assert suggested_rewrite(sweep, "a = 1\n", False, True, ends, "a = 0\n") == "a = 1\n"  # ends with its end token


def test_the_edit_bench_refuses_options_it_cannot_take(history):
    result = run_completer("bench", "--edits", str(history), "--preset", "smol", "--max-tokens", "8", "--typing",
                           "--copy-target", "0.8")
    assert result.returncode == 2 and "--max-tokens, --typing, --copy-target: not with --edits" in result.stderr
    result = run_completer("bench", str(history), "--preset", "smol", "--edit-format", "zeta")
    assert result.returncode == 2 and "--edit-format: only with --edits" in result.stderr


def test_a_tiny_real_edit_bench_decodes_the_same_rewrite_in_every_mode_and_replays(history, smol_cache, tmp_path):
    env = {"COMPLETER_CACHE_DIR": str(smol_cache)}
    out = tmp_path / "edits.json"
    result = run_completer("bench", "--edits", str(history), "--preset", "smol", "--modes", "ngram,hybrid,auto",
                           "--exact", "--report", str(out), env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "1 next edits from the history of" in result.stdout and "no edit" in result.stdout
    report = json.loads(out.read_text())
    summary = report["summary"]
    assert list(summary) == ["target", "ngram", "hybrid", "auto"]
    records = {r["mode"]: r for r in report["records"]}
    # Every mode makes target's rewrite, token for token (one token per target decode:
    # no near ties), copy drafting from the region included.
    assert all(r["tokens"] == records["target"]["tokens"] for r in records.values())
    assert all(entry["identical_rate"] == 1.0 for entry in summary.values())
    assert records["target"]["truth"] in NEAR and records["target"]["prompt_tokens"] > 0
    for entry in summary.values():
        assert entry["exact_match"] in (0.0, 1.0) and entry["no_edit_rate"] in (0.0, 1.0)
    assert report["settings"]["edits"]["lines_above"] == LINES[0]
    replay = tmp_path / "replay.json"
    result = run_completer("bench", "--edits", "--holes", str(out), "--preset", "smol", "--modes", "ngram",
                           "--edit-format", "instinct", "--report", str(replay), "--json", env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    replayed = json.loads(replay.read_text())
    assert replayed["holes"] == report["holes"] and replayed["settings"]["edits"]["format"] == "instinct"
    # Instinct's system prompt alone is longer than 400 tokens.
    assert replayed["records"][0]["prompt_tokens"] > records["target"]["prompt_tokens"] + 400
    assert [row["mode"] for row in json.loads(result.stdout)] == ["target", "ngram"]

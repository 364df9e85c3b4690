"""The workspace index: its lookups against brute force on synthetic tokens, which files
it reads (the workspace's own, never outside it, never what .gitignore excludes, git
or not), its budget, stale copies hidden, a build that survives bad files and a bad
saved index, cancelling, one build at a time, and proposals within the vocabulary."""

import asyncio
import gc
import logging
import os
import subprocess
import threading
import time
import weakref
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types

from completer.config import DEFAULT_EXCLUDE, Config, ContextOptions, DraftingOptions
from completer.decoders.local import LocalDecoder
from completer.engine.drafts import NgramDrafter
from completer.engine.generation import Engine, GenerationRequest, generate
from completer.engine.workspace_index import NO_MATCH, TokenTable, WorkspaceIndex, saved_index_path, workspace_files
from completer.models.llama import LlamaModel
from completer.models.sources import listed_files
from completer.workspace import Workspace
from lsp_session import start, stats, wait_ready

MIN_MATCH, MAX_MATCH = DraftingOptions().ngram_min_match, DraftingOptions().ngram_max_match
CHARACTERS = 0x110000  # the vocabulary of the tests' tokenizer: one token per character


def table_of(files: list[list[int]]) -> TokenTable:
    return TokenTable([(f"file{i}", np.array(tokens, np.int32)) for i, tokens in enumerate(files)])


def brute_force(files: list[list[int]], suffix: list[int], max_match: int) -> tuple[int, Counter]:
    """The longest match of the suffix's end in any file (not across files), followed by
    a token in that file, and how often each token follows it."""
    best, following = 0, Counter()
    for tokens in files:
        for end in range(1, len(tokens)):  # the match ends before tokens[end]
            length = 0
            while length < min(max_match, end, len(suffix)) and tokens[end - 1 - length] == suffix[-1 - length]:
                length += 1
            if length > best:
                best, following = length, Counter()
            if length == best and length:
                following[tokens[end]] += 1
    return (best, following) if best >= MIN_MATCH else (0, Counter())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=40), min_size=1, max_size=4),
       st.lists(st.integers(0, 3), min_size=0, max_size=30), st.integers(MIN_MATCH, 20))
def test_the_longest_match_and_the_most_frequent_continuation(files, suffix, max_match):
    table = table_of(files)
    length, positions = table.candidates(suffix, MIN_MATCH, max_match)
    expected, following = brute_force(files, suffix, max_match)
    assert length == expected
    if length:
        proposed, branches = table.continuation(positions, 1, branches=1)
        counts = sorted(following.values(), reverse=True)
        assert following[proposed[0]] == counts[0]
        if len(counts) > 1:  # the runner-up's continuation is the branch
            assert branches[0][0] != proposed[0] and following[branches[0][0]] == counts[1]
        else:
            assert branches == {}


def test_a_continuation_follows_the_candidates_that_agree_and_stops_at_the_file_end():
    # [1 2 3] is followed by 4 5 6 twice and by 4 7 once: the vote is 4, then 5, then 6.
    files = [[1, 2, 3, 4, 5, 6, 9], [1, 2, 3, 4, 7], [8, 1, 2, 3, 4, 5, 6]]
    table = table_of(files)
    length, positions = table.candidates([0, 1, 2, 3], MIN_MATCH, MAX_MATCH)
    assert length == 3
    assert table.continuation(positions, 8) == ([4, 5, 6, 9], {})
    assert table.continuation(positions, 8, branches=1) == ([4, 5, 6, 9], {1: [7]})
    # A branch goes on as far as its own candidates agree.
    forked = table_of([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 7, 8, 9]])
    _, starts = forked.candidates([1, 2, 3], MIN_MATCH, MAX_MATCH)
    assert forked.continuation(starts, 8, branches=1) == ([4, 5, 6], {1: [7, 8, 9]})
    length, positions = table.candidates([8, 1, 2, 3], MIN_MATCH, MAX_MATCH)  # only the third file has 8 1 2 3
    assert length == 4 and table.continuation(positions, 8)[0] == [4, 5, 6]


def test_matches_past_the_sort_depth_are_extended_and_capped_at_the_maximum():
    shared = list(range(100, 140))  # 40 tokens, longer than the sort's 12
    files = [[1, *shared, 7, 7], [2, *shared[5:], 8, 8]]
    table = table_of(files)
    length, positions = table.candidates([0, *shared], MIN_MATCH, 64)
    assert length == 40 and table.continuation(positions, 2)[0] == [7, 7]
    assert table.candidates([0, *shared], MIN_MATCH, 16)[0] == 16


def write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


CODE = "".join(f"def function_{i}(value):\n    return value * {i} + offset\n\n" for i in range(40))


def test_the_index_reads_the_workspace_files_only(tmp_path):
    root, outside = tmp_path / "repo", tmp_path / "secret"
    write(root / "pkg" / "code.py", CODE)
    write(root / "node_modules" / "lib.js", CODE)  # vendored
    write(root / "gen.py", "# @generated by a tool\n" + CODE)
    write(outside / "keys.py", CODE.replace("offset", "SECRET_KEY"))
    os.symlink(outside / "keys.py", root / "linked.py")
    os.symlink(outside, root / "linked_dir")
    files = workspace_files(Workspace([root]))
    assert files == [(root / "pkg" / "code.py").resolve()]


def test_a_secret_in_an_excluded_file_never_reaches_the_index_s_tokens(target, tmp_path):
    """The decoder's index of a workspace holding secrets under their usual names and one
    under a name of the user's own pattern, tokenized by the real model: none of them is
    in the table (the decoder passes context.exclude to the walker, which never opens
    them), while the ordinary file is."""
    secret = "SECRET_MARKER_7f3a9c"
    root = tmp_path / "repo"
    for name in ("secrets.py", ".env.py", ".env/settings.py", "config/credentials.py", "private_notes.py"):
        write(root / name, CODE.replace("offset", secret))
    write(root / "app.py", CODE)
    decoder = LocalDecoder(Engine(target, None, n_ctx=512, calibrate_s=0))
    decoder.configure(Config(context=ContextOptions(exclude=",".join((*DEFAULT_EXCLUDE, "private_*")))))
    decoder.index_workspace(Workspace([root])).join()
    table = decoder.index.table
    assert [os.path.basename(path) for path in table.paths] == ["app.py"]
    text = target.detokenize([int(token) for token in table.tokens if 0 <= token < target.n_vocab])
    assert "function_39" in text and secret not in text


def test_the_budget_keeps_the_most_recently_modified_files(tmp_path):
    root = tmp_path / "repo"
    for i in range(4):
        write(root / f"m{i}.py", CODE.replace("offset", f"offset_{i}"))
        os.utime(root / f"m{i}.py", (1_000_000 + i, 1_000_000 + i))
    tokenize = lambda text: [ord(c) for c in text]  # noqa: E731 - one token per character
    file_tokens = len(CODE.replace("offset", "offset_0"))
    index = WorkspaceIndex(DraftingOptions(index_mb=2.5 * file_tokens * 8 / 2**20))  # room for two files
    stats = index.build(Workspace([root]), tokenize)
    assert stats.ready and stats.files == 2
    assert [os.path.basename(p) for p in index.table.paths] == ["m3.py", "m2.py"]
    assert stats.mb <= index.options.index_mb


def test_a_hidden_file_is_not_drafted_from_and_the_open_documents_win_a_tie(tmp_path):
    root = tmp_path / "repo"
    write(root / "a.py", CODE)
    tokenize = lambda text: [ord(c) for c in text]  # noqa: E731
    index = WorkspaceIndex()
    index.build(Workspace([root]), tokenize)
    drafter = NgramDrafter(workspace=index)
    text = tokenize("x = 1\ndef function_7(value):\n    return va")
    assert drafter.lookup(text, 10)[:2] == ([], 0)  # no open document has it
    proposed, length, _ = drafter.lookup_workspace(text, 10, CHARACTERS)
    assert "".join(map(chr, proposed)) == "lue * 7 + "
    assert length == len("\ndef function_7(value):\n    return va")
    index.hide(str(root / "a.py"))  # the editor has its newer text
    assert drafter.lookup_workspace(text, 10, CHARACTERS)[:2] == ([], 0)
    index.show(str(root / "a.py"))
    drafter.set_other_document("open.py", tokenize("\ndef function_7(value):\n    return value + 1"))
    local = drafter.lookup(text, 10)
    assert "".join(map(chr, local.tokens)) == "lue + 1" and local.length == length
    assert drafter.lookup_workspace(text, 10, CHARACTERS, local.length)[:2] == ([], 0)  # a tie: the open document's


def test_a_second_build_reads_unchanged_files_from_the_saved_index(tmp_path):
    root = tmp_path / "repo"
    write(root / "a.py", CODE)
    write(root / "b.py", CODE.replace("offset", "bias"))
    tokenized: list[str] = []

    def tokenize(text: str) -> list[int]:
        tokenized.append(text)
        return [ord(c) for c in text]

    saved = tmp_path / "saved.npz"
    first = WorkspaceIndex()
    first.build(Workspace([root]), tokenize, saved=saved)
    assert len(tokenized) == 2 and saved.stat().st_mode & 0o077 == 0  # the user's source: theirs alone
    second = WorkspaceIndex()
    second.build(Workspace([root]), tokenize, saved=saved)
    assert len(tokenized) == 2  # nothing tokenized again
    assert (second.table.tokens == first.table.tokens).all() and (second.table.order == first.table.order).all()
    write(root / "b.py", CODE.replace("offset", "scale"))
    os.utime(root / "b.py", (2_000_000_000, 2_000_000_000))
    third = WorkspaceIndex()
    third.build(Workspace([root]), tokenize, saved=saved)
    assert len(tokenized) == 3 and "scale" in tokenized[-1]  # the changed file only
    text = [ord(c) for c in "def function_3(value):\n    return value * 3 + s"]
    assert "".join(map(chr, third.lookup(text, 4, CHARACTERS).tokens)) == "cale"
    for damaged in (b"not an index", saved.read_bytes()[:1000]):  # indexed from the files again, no error
        saved.write_bytes(damaged)
        assert WorkspaceIndex().build(Workspace([root]), tokenize, saved=saved).files == 2


def test_a_folder_that_is_not_a_repository_is_listed_without_its_ignored_and_dependency_files(tmp_path):
    """No git here: the .gitignore files still decide, each relative to its folder, and
    dependency and build folders are never walked."""
    root = tmp_path / "project"
    write(root / "app.py", CODE)
    write(root / ".gitignore", "secrets.py\n/local/\n")
    write(root / "secrets.py", CODE)
    write(root / "local" / "notes.py", CODE)
    write(root / "lib" / ".gitignore", "*.py\n!kept.py\n")
    write(root / "lib" / "dropped.py", CODE)
    write(root / "lib" / "kept.py", CODE)
    for folder in ("node_modules/pkg", ".venv/lib/python3.11/site-packages", ".git", "dist", "__pycache__"):
        write(root / folder / "module.py", CODE)
    found = sorted(path.relative_to(root.resolve()).as_posix() for path in workspace_files(Workspace([root])))
    assert found == ["app.py", "lib/kept.py"]


def test_listing_agrees_with_git_ls_files(tmp_path):
    """The rules as git applies them (nested files, negation, anchors, folder-only
    patterns, `**`, info/exclude), checked against git itself on a repository of ours."""
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    write(root / ".gitignore", "*.log\n!important.log\n/top.txt\nout/\ndocs/**/secret.md\n*.tmp\n!\n")
    write(root / "a" / ".gitignore", "c/\n!x.tmp\n")
    write(root / ".git" / "info" / "exclude", "private.py\n")
    for name in ("a.py", "top.txt", "x.log", "important.log", "a/top.txt", "a/b/c/d.py", "a/b/e.py", "a/x.tmp",
                 "a/y.tmp", "logs/z.log", "out/k.py", "docs/x/secret.md", "docs/secret.md", "private.py",
                 "a/private.py", "keep/k.py", "sub/top.txt"):
        write(root / name, "x\n")
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    assert sorted(path.relative_to(root).as_posix() for path in listed_files(root)) == sorted(filter(None, listed))
    # A folder of the repository opened on its own keeps the rules from above it.
    assert sorted(path.name for path in listed_files(root / "a")) == [".gitignore", "e.py", "top.txt", "x.tmp"]


def test_a_folder_its_repository_ignores_is_listed_when_asked_for(tmp_path):
    """`completer bench .venv/lib/python3.11/site-packages/pkg`: the user asked for it."""
    root = tmp_path / "repo"
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / ".gitignore", "installed/\n")
    write(root / "installed" / "pkg" / "module.py", CODE)
    assert [path.name for path in listed_files(root / "installed" / "pkg")] == ["module.py"]
    assert listed_files(root) == [root / ".gitignore"]


def test_the_listing_stops_at_its_cap(tmp_path):
    for i in range(30):
        write(tmp_path / f"d{i % 3}" / f"m{i}.py", CODE)
    assert len(listed_files(tmp_path, most=7)) == 7
    assert len(workspace_files(Workspace([tmp_path]), most=7)) == 7


def too_long_a_path(folder: Path) -> Path:
    """A file that exists but that no path can open, as root too: its folder is under
    PATH_MAX, the file's full path over it (ENAMETOOLONG). Made through a folder's fd."""
    deep = folder
    while len(str(deep)) < os.pathconf("/", "PC_PATH_MAX") - 300:
        deep = deep / ("d" * 200)
    deep.mkdir(parents=True)
    handle = os.open(str(deep), os.O_RDONLY)
    try:
        name = "f" * 250 + ".py"
        with open(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=handle), "w") as out:
            out.write(CODE)
    finally:
        os.close(handle)
    return deep / name


def test_a_file_that_cannot_be_read_or_is_gone_is_skipped_and_the_build_goes_on(tmp_path):
    root = tmp_path / "repo"
    for age, name in enumerate(("c.py", "b.py", "a.py")):  # read newest first: c, b, a
        write(root / name, CODE.replace("offset", name[0]))
        os.utime(root / name, (2_000_000_000 - age, 2_000_000_000 - age))
    unreadable = too_long_a_path(root / "deep")
    with pytest.raises(OSError):
        unreadable.stat()

    def tokenize_deleting_b(text: str) -> list[int]:
        (root / "b.py").unlink(missing_ok=True)  # listed, and gone before it is read
        return [ord(c) for c in text]

    index = WorkspaceIndex()
    stats = index.build(Workspace([root]), tokenize_deleting_b)
    assert stats.ready and [Path(path).name for path in index.table.paths] == ["c.py", "a.py"]


def test_an_empty_or_damaged_saved_index_is_removed_and_the_workspace_indexed_again(tmp_path, caplog):
    root = tmp_path / "repo"
    write(root / "a.py", CODE)
    tokenize = lambda text: [ord(c) for c in text]  # noqa: E731
    saved = tmp_path / "saved.npz"
    for damaged in (b"", b"\x93NUMPY", b"PK\x03\x04"):
        saved.write_bytes(damaged)
        with caplog.at_level(logging.WARNING, "completer.engine.workspace_index"):
            assert WorkspaceIndex().build(Workspace([root]), tokenize, saved=saved).files == 1
        assert "does not read back" in caplog.text and "removed" in caplog.text
        caplog.clear()
        assert WorkspaceIndex().build(Workspace([root]), lambda text: pytest.fail("tokenized again"),
                                      saved=saved).files == 1  # the build wrote a good one back
    saved.write_bytes(b"")
    assert WorkspaceIndex().build(Workspace([tmp_path / "empty"]), tokenize, saved=saved).files == 0
    assert not saved.exists()  # nothing to write back, and the bad one is not read on every start


def test_a_build_that_fails_is_logged_and_changes_nothing(tmp_path, caplog):
    root = tmp_path / "repo"
    write(root / "a.py", CODE)

    def broken(text: str) -> list[int]:
        raise RuntimeError("the tokenizer is gone")

    index = WorkspaceIndex()
    with caplog.at_level(logging.ERROR, "completer.engine.workspace_index"):
        stats = index.build(Workspace([root]), broken)
    assert not stats.ready and index.table is None
    assert "was not built" in caplog.text and "the tokenizer is gone" in caplog.text


class BlockingTokenizer:
    """Tokenizes one character a token, after the test lets it: a build held mid-file."""

    def __init__(self):
        self.started, self.go, self.calls = threading.Event(), threading.Event(), 0

    def __call__(self, text: str) -> list[int]:
        self.calls += 1
        self.started.set()
        assert self.go.wait(30)
        return [ord(c) for c in text]


def test_a_cancelled_build_stops_at_its_next_file_and_lets_go_of_the_tokenizer(tmp_path):
    root = tmp_path / "repo"
    for i in range(5):
        write(root / f"m{i}.py", CODE.replace("offset", f"offset_{i}"))
    index, tokenizer, cancel = WorkspaceIndex(), BlockingTokenizer(), threading.Event()
    held = weakref.ref(tokenizer)
    build = threading.Thread(target=index.build, args=(Workspace([root]), tokenizer), kwargs={"cancel": cancel})
    build.start()
    assert tokenizer.started.wait(30)
    cancel.set()  # a reload: the old model must be freed
    tokenizer.go.set()
    build.join(30)
    assert not build.is_alive() and tokenizer.calls == 1 and index.table is None
    del tokenizer, build
    gc.collect()
    assert held() is None  # nothing keeps the old model's tokenizer


def test_two_builds_never_run_at_once(tmp_path):
    root = tmp_path / "repo"
    write(root / "a.py", CODE)
    first, second = BlockingTokenizer(), BlockingTokenizer()
    second.go.set()
    builds = [threading.Thread(target=WorkspaceIndex().build, args=(Workspace([root]), tokenizer))
              for tokenizer in (first, second)]
    builds[0].start()
    assert first.started.wait(30)
    builds[1].start()
    time.sleep(0.5)
    assert not second.started.is_set()  # waits while the first holds the build
    first.go.set()
    for build in builds:
        build.join(30)
    assert second.calls == 1


def test_index_proposals_stay_within_the_vocabulary(tmp_path):
    """A table of another vocabulary's ids (a GGUF replaced in place): the proposal and
    its branches end before the first id the model lacks."""
    table = table_of([[1, 2, 3, 4, 5, 900, 6], [1, 2, 3, 4, 5, 7, 900], [1, 2, 3, 4, 5, 7, 8]])
    index = WorkspaceIndex(DraftingOptions(tree_branches=1))
    index.table = table
    assert index.lookup([0, 1, 2, 3], 8, 1000) == ([4, 5, 7, 8], 3, {2: [900, 6]})
    assert index.lookup([0, 1, 2, 3], 8, 900) == ([4, 5, 7, 8], 3, {})
    assert index.lookup([0, 1, 2, 3], 8, 5) == ([4], 3, {})
    assert index.lookup([0, 1, 2, 3], 8, 4) == NO_MATCH


def test_the_saved_index_is_keyed_on_the_model_file_not_its_path(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF one vocabulary")
    before = saved_index_path(model, [tmp_path])
    assert saved_index_path(model, [tmp_path]) == before
    model.write_bytes(b"GGUF another vocabulary, the same path")
    assert saved_index_path(model, [tmp_path]) != before


def test_an_index_of_ids_the_target_lacks_drafts_nothing_and_decoding_goes_on(smol):
    """Through the engine on the real model: llama_decode refuses a batch with an id past
    the vocabulary, so such a draft must never reach it."""
    target = LlamaModel(smol.target, n_gpu_layers=0)
    engine = Engine(target, None, n_ctx=512, calibrate_s=0, exact=True)  # drafts change no token, near ties too
    # Text whose end occurs nowhere earlier in it: the index is the only n-gram provider.
    prompt = target.tokenize("import json\n\n\ndef load_settings(path):\n"
                             "    with open(path) as handle:\n        return")
    plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=8, mode="target"))
    beyond = [target.n_vocab + 7, target.n_vocab + 9] * 4
    engine.ngram.workspace = WorkspaceIndex()
    engine.ngram.workspace.table = TokenTable([("other.py", np.array(prompt[-12:] + beyond, np.int32))])
    assert engine.ngram.lookup_workspace(prompt, 4, target.n_vocab + 10).tokens == beyond[:4]  # it matches
    drafted = generate(engine, GenerationRequest(prompt=prompt, max_tokens=8, mode="ngram", draft_length=4))
    assert drafted.tokens == plain.tokens


@pytest.mark.slow  # seconds of real model passes
async def test_a_reload_cancels_the_index_build_under_way(smol, smol_cache, tmp_path, capfd):
    """A settings change that reloads the models while the index of a 6 MB workspace is
    being built: the old build stops (it held the old model), and only the new one
    finishes, each build logging once when it does."""
    for i in range(300):
        write(tmp_path / f"pkg{i % 10}" / f"module_{i}.py", CODE.replace("offset", f"offset_{i}") * 10)
    client = await start(smol_cache, {"generation": {"draft_mode": "target", "max_tokens": 8}}, root=tmp_path)
    try:
        await wait_ready(client)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"completer": {"generation": {"draft_mode": "ngram"}}}))
        await wait_ready(client)
        deadline = time.monotonic() + 300
        while not (await stats(client))["index_files"]:
            assert time.monotonic() < deadline, "the new index was not built"
            await asyncio.sleep(0.2)
    finally:
        await client.shutdown_session()
    assert capfd.readouterr().err.count("workspace index: 300 files") == 1

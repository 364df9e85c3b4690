"""Hostile workspaces opened in the real server over stdio: a repository whose own git
configuration names programs (core.fsmonitor, hooks, .gitattributes filters and diff
drivers, diff.external, the pager, editors, credential helpers) gets indexed and
completed in, and none of those programs runs; a folder that is not a repository keeps
its .gitignore'd files and its dependency folders out of the index."""

import asyncio
import subprocess
from pathlib import Path

import numpy as np
import pytest

from lsp_session import inline, open_document, start, stats, wait_ready

CODE = "".join(f"def helper_{i}(value):\n    return value * {i} + offset\n\n" for i in range(40))
SECRET = "zq_unique_token_8f3a91"  # in every file that must stay out of the index


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def armed_repository(root: Path, markers: Path) -> None:
    """A repository with a tracked file (git's index exists: fsmonitor is asked about it)
    whose configuration then names, for everything git could run, a command that leaves
    a marker file."""
    write(root / "helpers.py", CODE)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "helpers.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "helpers"], check=True)
    hooks = root / "hooks"
    for hook in ("pre-commit", "post-checkout", "post-index-change", "reference-transaction", "fsmonitor-watchman"):
        write(hooks / hook, f"#!/bin/sh\ntouch {markers}/hook-{hook}\n", 0o755)
    write(root / ".gitattributes", "* filter=evil diff=evil\n")
    touch = {name: f"touch {markers}/{name}" for name in
             ("fsmonitor", "clean", "smudge", "process", "textconv", "external", "pager", "editor", "askpass",
              "credential", "ssh")}
    with (root / ".git" / "config").open("a") as config:
        config.write(f"""[core]
\tfsmonitor = {touch['fsmonitor']}
\thooksPath = {hooks}
\tpager = {touch['pager']}
\teditor = {touch['editor']}
\taskPass = {touch['askpass']}
\tsshCommand = {touch['ssh']}
[filter "evil"]
\tclean = {touch['clean']}
\tsmudge = {touch['smudge']}
\tprocess = {touch['process']}
\trequired = true
[diff "evil"]
\ttextconv = {touch['textconv']}
[diff]
\texternal = {touch['external']}
[credential]
\thelper = !{touch['credential']}
""")


async def indexed(client, timeout: float = 180) -> dict:
    """The server's statistics once its index holds at least one file."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not (current := await stats(client))["index_files"]:
        assert asyncio.get_running_loop().time() < deadline, current
        await asyncio.sleep(0.2)
    return current


@pytest.mark.slow  # over 4 s here: `make test-fast` keeps to 3 minutes
async def test_opening_a_repository_runs_none_of_the_programs_its_git_config_names(smol, smol_cache, tmp_path):
    root, markers = tmp_path / "repo", tmp_path / "markers"
    markers.mkdir()
    armed_repository(root, markers)
    client = await start(smol_cache, root=root)
    try:
        await wait_ready(client)
        uri = (root / "main.py").as_uri()
        text = "from helpers import helper_3\n\n\ndef helper_40(value):\n    return value"
        open_document(client, uri, text)
        assert (await indexed(client))["index_files"] == 1  # helpers.py, read without git
        await inline(client, uri, text.count("\n"), len(text.splitlines()[-1]))
        assert (await stats(client))["ready"]
    finally:
        await client.shutdown_session()
    assert sorted(path.name for path in markers.iterdir()) == []
    # The trap was armed: git itself, asked for the same list, runs the fsmonitor command.
    subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, timeout=60)
    assert (markers / "fsmonitor").exists()


def saved_index_paths(cache: Path, root: Path) -> list[str]:
    """The files of every saved index in the server's cache that are under `root`."""
    found = []
    for saved in (cache / "index").glob("*.npz"):
        with np.load(saved, allow_pickle=False) as data:
            found += [path for path in data["paths"].tolist() if path.startswith(str(root.resolve()))]
    return found


@pytest.mark.slow  # over 4 s here: `make test-fast` keeps to 3 minutes
async def test_a_folder_that_is_not_a_repository_keeps_ignored_and_dependency_files_out_of_the_index(
        smol, smol_cache, tmp_path):
    root = tmp_path / "project"
    write(root / "app.py", CODE)
    write(root / ".gitignore", "credentials.py\nprivate/\n")
    write(root / "credentials.py", CODE.replace("offset", SECRET))
    write(root / "private" / "notes.py", CODE.replace("offset", SECRET))
    for folder in ("node_modules/left-pad", ".venv/lib/python3.11/site-packages/pkg", "build/lib", "dist",
                   "__pycache__", "vendor/lib", "target/debug"):
        write(root / folder / "module.py", CODE.replace("offset", SECRET))
    client = await start(smol_cache, root=root)
    try:
        await wait_ready(client)
        uri = (root / "main.py").as_uri()
        open_document(client, uri, "def helper_40(value):\n    return value")
        assert (await indexed(client))["index_files"] == 1
    finally:
        await client.shutdown_session()
    assert [Path(path).name for path in saved_index_paths(smol_cache, root)] == ["app.py"]

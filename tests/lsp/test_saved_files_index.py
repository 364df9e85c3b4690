"""The indexes of the files saved since the workspace index was built: within their share
of drafting.index_mb, the least recently used dropped first and no longer drafted from,
counted in completer/stats' index_mb, and not rebuilt on the event loop when a drafting
option changes."""

import asyncio
import random
import time
import tracemalloc

import pytest
from lsprotocol import types

from completer.config import DraftingOptions
from completer.engine.drafts import NgramDrafter, NgramIndex
from completer.engine.workspace_index import SAVED_FILES_SHARE
from lsp_session import open_document, ready, stats


def code(i: int) -> str:
    """About 200 tokens of Python no other `i` shares a line of."""
    return "".join(f"def handler_{i}_{w}(request, value_{i}):\n    total_{i} = value_{i} * {i * 7 + w} + "
                   f"request.offset_{i}\n    return total_{i}\n\n" for w in range(6))


def tokens_of(i: int) -> list[int]:
    """Distinct token ids for file `i` (1000 apart from any other file's)."""
    return [1000 * (i + 1) + n for n in range(200)]


def saved_share_for(files: float, drafter: NgramDrafter) -> DraftingOptions:
    """Options whose saved files' share of index_mb holds `files` files of tokens_of()."""
    one = drafter.saved_file_index(tokens_of(0)).nbytes
    return DraftingOptions(index_mb=files * one / SAVED_FILES_SHARE / 2**20)


def test_the_least_recently_used_saved_file_is_dropped_and_no_longer_drafted_from():
    drafter = NgramDrafter()
    drafter.configure(saved_share_for(2.5, drafter))
    for i in range(3):
        drafter.set_saved_file(f"f{i}.py", drafter.saved_file_index(tokens_of(i)))
        assert drafter.saved_bytes <= drafter.saved_budget_bytes
    assert list(drafter.saved_files) == ["f1.py", "f2.py"]
    assert drafter.lookup(tokens_of(0)[:10], 4).tokens == []  # f0.py went: nothing proposed from it
    assert drafter.lookup(tokens_of(1)[:10], 4).tokens == tokens_of(1)[10:14]
    # f1.py was drafted from, so f2.py is now the least recently used: the next one drops it.
    drafter.set_saved_file("f3.py", drafter.saved_file_index(tokens_of(3)))
    assert list(drafter.saved_files) == ["f1.py", "f3.py"]
    assert drafter.saved_bytes == sum(index.nbytes for index in drafter.saved_files.values())


def test_a_smaller_index_mb_drops_saved_files_at_once_and_zero_keeps_none():
    drafter = NgramDrafter()
    drafter.configure(saved_share_for(3.5, drafter))
    for i in range(3):
        drafter.set_saved_file(f"f{i}.py", drafter.saved_file_index(tokens_of(i)))
    drafter.configure(saved_share_for(1.5, drafter))
    assert list(drafter.saved_files) == ["f2.py"]
    drafter.configure(DraftingOptions(index_mb=0))
    assert not drafter.saved_files and drafter.saved_bytes == 0


def test_a_new_match_length_rebuilds_no_index_in_configure_only_at_the_next_lookup():
    """configure() runs on the language server's event loop: rebuilding 200 saved files of
    5,000 tokens there held it for seconds."""
    drafter = NgramDrafter()
    drafter.configure(saved_share_for(4, drafter))
    index = drafter.saved_file_index(tokens_of(0))
    drafter.set_saved_file("f0.py", index)
    drafter.configure(DraftingOptions(index_mb=drafter.options.index_mb, ngram_min_match=5))
    assert drafter.saved_files["f0.py"] is index  # nothing built yet
    found = drafter.lookup([7, *tokens_of(0)[:5]], 2)
    assert found.tokens == tokens_of(0)[5:7] and found.length == 5
    rebuilt = drafter.saved_files["f0.py"]
    assert rebuilt.min_match == 5 and drafter.saved_bytes == rebuilt.nbytes
    assert drafter.lookup([7, *tokens_of(0)[:4]], 2).tokens == []  # 4 tokens no longer match


def test_the_memory_estimate_is_near_what_the_index_takes():
    rng = random.Random(0)
    text = [str(300 + rng.randrange(5000)) for _ in range(5000)]
    tracemalloc.start()
    try:
        index = NgramIndex([int(token) for token in text])  # fresh int objects, as a tokenizer returns
        taken, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0.8 < index.nbytes / taken < 1.25


@pytest.mark.slow  # seconds of real model passes
async def test_saving_many_files_keeps_index_mb_within_its_budget_and_counts_them(smol, smol_cache, tmp_path):
    """Every file an editor saves got an index of its own, never dropped and never counted:
    about 250 MB after 200 files of 5,000 tokens."""
    root = tmp_path / "project"
    root.mkdir()
    budget_mb = 1.0  # the saved files' share holds about 3 of these files; the 40 take 1.7 MB
    client = await ready(smol_cache, {"drafting": {"index_mb": budget_mb}}, root=root)
    try:
        for i in range(40):
            path = root / f"module_{i}.py"
            path.write_text(code(i))
            open_document(client, path.as_uri(), code(i))
            client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(
                path.as_uri())))
        seen: list[float] = []
        deadline = time.monotonic() + 20
        # didSave is a notification: poll until the figure has been steady for a second.
        while time.monotonic() < deadline and (len(seen) < 5 or len(set(seen[-5:])) > 1 or not seen[-1]):
            seen.append((await stats(client))["index_mb"])
            await asyncio.sleep(0.25)
    finally:
        await client.shutdown_session()
    assert max(seen) <= budget_mb, f"index_mb went past drafting.index_mb: {max(seen):.2f} MB"
    assert seen[-1] >= budget_mb * SAVED_FILES_SHARE / 2, f"the saved files are not counted: {seen[-1]:.3f} MB"

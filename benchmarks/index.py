"""How big a workspace the index takes, in how long and how much memory.

    python -m benchmarks.index [ROOT] [--preset smol] [--index-mb 256]

Algorithm:
    build the workspace index of ROOT (default: the standard library) with the preset
        target's tokenizer, from nothing (a fresh saved-index file), timed; the peak
        resident memory of this process before and after
    build it again from the saved index (what a restart does), timed
    time lookups at 200 cursors spread over the indexed files, each file's text up to
        the cursor hidden from the index as the editor's open document would be
Report files, tokens, the index's memory, both build times, the peak memory the build
added, and the lookup's median and p95 in ms.
"""

import argparse
import resource
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

from completer.config import DraftingOptions, ModelOptions
from completer.engine.workspace_index import WorkspaceIndex
from completer.loading import load_pair
from completer.workspace import Workspace


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=sysconfig.get_paths()["stdlib"])
    parser.add_argument("--preset", default="smol")
    parser.add_argument("--index-mb", type=float, default=DraftingOptions().index_mb)
    args = parser.parse_args()
    target = load_pair(ModelOptions(preset=args.preset), with_draft=False).target
    workspace = Workspace([Path(args.root)])
    options = DraftingOptions(index_mb=args.index_mb)
    with tempfile.TemporaryDirectory() as folder:
        saved = Path(folder) / "index.npz"
        before = peak_mb()
        cold = WorkspaceIndex(options).build(workspace, target.tokenize, saved=saved)
        added = peak_mb() - before
        index = WorkspaceIndex(options)
        warm = index.build(workspace, target.tokenize, saved=saved)
    table = index.table
    rng = np.random.default_rng(0)
    times = []
    for number in rng.choice(len(table.paths), size=min(200, len(table.paths)), replace=False):
        start, end = int(table.starts[number]), int(table.starts[number + 1] if number + 1 < len(table.starts)
                                                     else len(table.tokens)) - 1
        if end - start < 64:
            continue
        cursor = int(rng.integers(start + 32, end))
        text = table.tokens[start:cursor].tolist()
        index.hide(table.paths[number])
        started = time.perf_counter()
        index.lookup(text, 48)
        times.append((time.perf_counter() - started) * 1000)
        index.show(table.paths[number])
    print(f"{args.root}: {cold.files} files, {cold.tokens:,} tokens, index {cold.mb:.0f} MB "
          f"(drafting.index_mb {args.index_mb:g})")
    print(f"built from nothing in {cold.build_s:.1f} s (peak memory +{added:.0f} MB); "
          f"from the saved index in {warm.build_s:.1f} s")
    print(f"lookup: median {statistics.median(times):.2f} ms, p95 {np.percentile(times, 95):.2f} ms "
          f"over {len(times)} cursors")


if __name__ == "__main__":
    main()

"""What distillation buys: the smol draft before and after `completer distill` on one
repository, measured on that repository's held-out files only.

    python -m benchmarks.distill REPO [--minutes 30] [--holes 24] [--skip-training]

1. `completer distill --preset smol --data REPO --minutes M` (the draft goes to the
   cache, as `--draft distilled`), unless --skip-training reuses the one there.
2. Acceptance at temperature 0 through llama.cpp: on every held-out window (the files
   distill held out), the share of positions where each draft's argmax is the target's.
3. `completer bench` on holes cut in the held-out files only: target, draft and hybrid
   with the preset's draft, and draft:distilled and hybrid:distilled beside them.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

from completer.bench.holes import LANGUAGES, pick_holes
from completer.models.llama import LlamaModel
from completer.models.distill import build_corpus, corpus_files, held_out, llama_cpp_agreement
from completer.models.distill_settings import DistillSettings
from completer.models.paths import distilled_draft_path
from completer.models.presets import Preset
from completer.models.resolve import resolve


def completer(*args: str) -> None:
    command = [str(Path(sys.executable).with_name("completer")), *args]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repository", type=Path)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--holes", type=int, default=24)
    parser.add_argument("--skip-training", action="store_true")
    args = parser.parse_args()
    repository = args.repository.resolve()

    if not args.skip_training:
        completer("distill", "--preset", "smol", "--data", str(repository), "--minutes", str(args.minutes))
    files = resolve(Preset.from_name("smol"))
    distilled = distilled_draft_path(files.target)

    settings = DistillSettings(steps=1)  # the split and windows distill used
    target = LlamaModel(files.target, 0)
    corpus = build_corpus(corpus_files([repository], LANGUAGES), target.tokenize, settings)
    before = llama_cpp_agreement(target, files.draft, corpus.held_out)
    after = llama_cpp_agreement(target, distilled, corpus.held_out)
    print(f"held-out acceptance at T=0 through llama.cpp ({len(corpus.held_out)} windows of {settings.window} "
          f"tokens from {corpus.held_out_files} held-out files): undistilled {before:.3f}, distilled {after:.3f} "
          f"({after / before:.1f}x)", flush=True)

    holes = pick_holes([repository], args.holes, seed=1, keep=lambda path: held_out(path, settings.holdout))
    holes_file = Path("distill-holes.json")
    holes_file.write_text(json.dumps([hole.to_json() for hole in holes]))
    completer("bench", "--preset", "smol", "--holes", str(holes_file), "--modes", "draft,hybrid",
              "--report", "distill-bench.json")


if __name__ == "__main__":
    main()

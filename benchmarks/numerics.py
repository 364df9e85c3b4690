"""How far llama.cpp's batched and one-token kernels disagree: the near-tie bound.

    python -m benchmarks.numerics [--holes 12] [--tokens 48] [--preset smol]

Holes are `completer bench`'s, in the standard library; the prompt is the file up to
the cursor under its path comment (its last 1,500 tokens).

Plain decoding scores one token per pass; verification scores k+1 in one batch.
The kernels sum in different orders, so the same position gets slightly different
logits. A greedy argmax can flip only where the target's top-2 gap is smaller than
how much that gap itself moves between the two paths. For each hole this greedily
decodes `tokens` tokens one at a time, then scores the same tokens in one batch, and
reports how much the top-2 gap moved: the largest such movement bounds the gaps at
which speculative and plain greedy outputs may honestly differ.
"""

import argparse
import sysconfig
from pathlib import Path

import numpy as np

from completer.bench.holes import Hole, pick_holes
from completer.prompt import path_header
from models.backend import LlamaContext, LlamaModel
from models.presets import Preset
from models.resolve import resolve


def hole_prompt(hole: Hole) -> str:
    lines = hole.path.read_text(encoding="utf-8", errors="replace").split("\n")
    return path_header(hole.file) + "\n".join(lines[: hole.line] + [lines[hole.line][: hole.column]])


def gap_movements(model: LlamaModel, prompt: list[int], steps: int) -> np.ndarray:
    context = LlamaContext(model, n_ctx=2048)
    logits = context.eval(prompt, 0, logits_at=[-1])[0]
    single, generated = [logits], []
    for position in range(len(prompt), len(prompt) + steps - 1):
        generated.append(int(logits.argmax()))
        logits = context.eval([generated[-1]], position, logits_at=[0])[0]
        single.append(logits)
    context.truncate(len(prompt) - 1)
    batched = context.eval([prompt[-1], *generated], len(prompt) - 1, logits_at=list(range(len(generated) + 1)))
    moved = []
    for one, many in zip(single, batched):
        first, second = np.argsort(-one)[:2]
        moved.append(abs((one[first] - one[second]) - (many[first] - many[second])))
    return np.array(moved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--holes", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--preset", default="smol")
    args = parser.parse_args()
    files = resolve(Preset.from_name(args.preset))
    model = LlamaModel(files.target)
    moved = np.concatenate([
        gap_movements(model, model.tokenize(hole_prompt(hole))[-1500:], args.tokens)
        for hole in pick_holes([Path(sysconfig.get_paths()["stdlib"])], args.holes, args.seed)
    ])
    print(f"{model.path.name}: top-2 gap moved by batched vs one-token scoring over {len(moved)} positions: "
          f"median {np.median(moved):.3f}, 99th percentile {np.percentile(moved, 99):.3f}, max {moved.max():.3f}")


if __name__ == "__main__":
    main()

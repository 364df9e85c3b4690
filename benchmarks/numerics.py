"""Where greedy speculation parts from plain decoding, and how near a tie it is there:
the measurement behind NEAR_TIE_LOGITS.

    python -m benchmarks.numerics [--holes 12] [--tokens 48] [--preset smol]

Holes are `completer bench`'s, in the standard library; the prompt is the file up to
the cursor under its path comment (its last 1,500 tokens).

Plain decoding scores one token per pass; verification scores k+1 in one batch. The
kernels sum in different orders, so a greedy argmax may flip where two tokens nearly
tie. For each hole, plain decoding continues the prompt and keeps its own logits. Each
speculative configuration then continues the same prompt; where it parts from plain,
the gap between the two tokens in plain's logits at that position is recorded, and it
starts again from plain's text one token further, so a hole yields every parting, not
only its first. The largest gap is what NEAR_TIE_LOGITS must exceed. The share of
plain positions whose top-2 gap is under a bound is what that bound lets pass: at
any of them a swap of the top two would be judged a near tie.
"""

import argparse
import sysconfig
from dataclasses import replace
from pathlib import Path

import numpy as np

from completer.bench.holes import Hole, pick_holes
from completer.config import Config, ModelOptions
from completer.engine.generation import Engine, GenerationRequest, generate
from completer.engine.speculative import NEAR_TIE_LOGITS, first_parting, parting_gap
from completer.loading import engine_for, load_pair
from completer.prompt import path_header

# (mode, k): k None lets the tuner choose. The target drafts for itself, so that rounds
# are long and batches reach k+1 (the smol pair's derived draft is rarely accepted).
CONFIGURATIONS = [("ngram", None), ("draft", 2), ("draft", 4), ("draft", 6), ("hybrid", None), ("auto", None)]


def hole_prompt(hole: Hole) -> str:
    lines = hole.path.read_text(encoding="utf-8", errors="replace").split("\n")
    return path_header(hole.file) + "\n".join(lines[: hole.line] + [lines[hole.line][: hole.column]])


def parting_gaps(engine: Engine, prompt: list[int], plain_logits: np.ndarray, mode: str,
                 k: int | None) -> list[float]:
    """Every parting of one configuration from plain decoding [n, V] on one prompt."""
    plain = plain_logits.argmax(axis=1).tolist()  # its end-of-generation token included
    gaps, start = [], 0
    while start < len(plain):
        fast = generate(engine, GenerationRequest(prompt=prompt + plain[:start], max_tokens=len(plain) - start,
                                                  mode=mode, draft_length=k, keep_logits=True))
        chosen = fast.logits.argmax(axis=1)  # its tokens and the end token that stopped it
        at = first_parting(plain[start:], chosen)
        if at is None:
            break
        gaps.append(parting_gap(plain_logits[start:], chosen))
        start += at + 1
    return gaps


def top2_gaps(logits: np.ndarray) -> np.ndarray:
    """[n, V] -> [n]: each row's largest logit less its second."""
    top = np.sort(logits, axis=1)[:, -2:]  # [n, 2]
    return top[:, 1] - top[:, 0]


def report(gaps: np.ndarray, positions: np.ndarray, runs: int, bounds: list[float]) -> None:
    print(f"{len(gaps)} partings in {runs} runs of {len(positions)} plain positions "
          f"({len(CONFIGURATIONS)} configurations)")
    if len(gaps):
        print(f"gap between the parted tokens in plain's logits: median {np.median(gaps):.3f}, "
              f"90th percentile {np.percentile(gaps, 90):.3f}, max {gaps.max():.3f}")
        print("largest:", " ".join(f"{g:.3f}" for g in np.sort(gaps)[-8:]))
    for bound in bounds:
        print(f"bound {bound:.2f}: admits {np.mean(positions < bound):.1%} of plain positions (top-2 gap below it), "
              f"{np.mean(gaps < bound) if len(gaps) else 1:.0%} of the partings")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--holes", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--preset", default="smol")
    parser.add_argument("--bounds", type=float, nargs="*", default=[0.25, 0.5, NEAR_TIE_LOGITS, 0.75])
    args = parser.parse_args()
    config = Config(models=ModelOptions(preset=args.preset, context_tokens=2048))
    pair = load_pair(config.models, with_draft=False)
    engine, pair = engine_for(replace(pair, draft=pair.target), config)
    model = pair.target
    gaps, positions, runs = [], [], 0
    for hole in pick_holes([Path(sysconfig.get_paths()["stdlib"])], args.holes, args.seed):
        prompt = model.tokenize(hole_prompt(hole))[-1500:]
        plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=args.tokens, mode="target",
                                                   keep_logits=True)).logits  # [n, V]
        positions.append(top2_gaps(plain))
        for mode, k in CONFIGURATIONS:
            gaps += parting_gaps(engine, prompt, plain, mode, k)
            runs += 1
    report(np.array(gaps), np.concatenate(positions), runs, sorted(set(args.bounds)))


if __name__ == "__main__":
    main()

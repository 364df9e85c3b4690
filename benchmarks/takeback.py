"""What a rejected draft token costs, in target steps, on each kind of model memory: the
figure that says whether speculation can pay on a hybrid or recurrent model as it does
on full attention.

    python -m benchmarks.takeback MODEL.gguf [MODEL.gguf ...] [--context 512] [--trials 9]

Each model's context is made as the engine makes its target's with GPU layers
(ROLLBACK_TOKENS of llama.cpp's rollback snapshots where the architecture has them,
checkpoints within cache.checkpoint_mb where it has none; on the CPU the engine keeps
no snapshots, see ROLLBACK_TOKENS) and holds `context` tokens of
completer/engine/kv.py. Then, for each (drafted, accepted) pattern, medians of `trials`:

    round: a verify batch of drafted + 1 tokens, then the cut back to the accepted
           ones, as the engine makes it (llama.cpp's rollback, or a return to the
           checkpoint kept before the batch and the accepted tokens evaluated again)
    ideal: a batch of accepted + 1 tokens, the round a draft of just the accepted
           tokens would have made
    step:  one token

A rejected token costs (round - ideal) / (drafted - accepted) steps. On full attention
that is only the batch's extra width; where the state cannot be cut, the snapshots,
checkpoint and return come on top. The state goes back to the prompt between trials,
outside the timing.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

from completer.config import CacheOptions
from completer.engine.generation import ROLLBACK_TOKENS
from completer.engine.kv import KVSequence
from completer.models.llama import LlamaContext, LlamaModel

PATTERNS = ((4, 0), (4, 2), (8, 0), (8, 4), (16, 8))  # (drafted, accepted)


def sequence_for(model: LlamaModel, context: int) -> KVSequence:
    """The engine's target sequence over `model`, holding `context` tokens of kv.py and a
    checkpoint there to come back to between trials."""
    sequence = KVSequence(LlamaContext(model, n_ctx=context + 64, rollback_tokens=ROLLBACK_TOKENS),
                          CacheOptions().checkpoint_mb)
    text = (Path(__file__).parent.parent / "completer" / "engine" / "kv.py").read_text()
    sequence.extend(model.tokenize(text)[:context])
    sequence.checkpoint()
    return sequence


def batch_ms(sequence: KVSequence, width: int, trials: int, accepted: int | None = None) -> float:
    """Median ms of evaluating `width` tokens (each row's logits, as a verify batch),
    with `accepted`, the cut back to the prompt and `accepted` + 1 of them."""
    held, times = len(sequence.tokens), []
    batch = sequence.tokens[100 : 100 + width]  # any text: only the time matters

    def round_() -> None:
        if accepted is not None:
            sequence.expect_cut(width)
        sequence.extend(batch, logits_at=list(range(width)))
        if accepted is not None:
            sequence.truncate(held + accepted + 1)

    for _ in range(trials):
        started = time.perf_counter()
        round_()
        times.append((time.perf_counter() - started) * 1000)
        sequence.truncate(held)
    return statistics.median(times)


def measure(path: Path, context: int, trials: int) -> dict:
    model = LlamaModel(path, n_gpu_layers=0)
    sequence = sequence_for(model, context)
    step = batch_ms(sequence, 1, trials)
    rows = []
    for drafted, accepted in PATTERNS:
        round_ms = batch_ms(sequence, drafted + 1, trials, accepted)
        ideal_ms = batch_ms(sequence, accepted + 1, trials)
        rejected_steps = (round_ms - ideal_ms) / (drafted - accepted) / step
        taken_back_by = ("a cut" if sequence.context.cuts_anywhere else
                         "rollback" if sequence.context.can_take_back(drafted + 1) else "checkpoint")
        rows.append({"drafted": drafted, "accepted": accepted, "round_ms": round_ms, "ideal_ms": ideal_ms,
                     "rejected_token_steps": rejected_steps, "taken_back_by": taken_back_by})
    return {"model": path.name, "memory": model.memory, "step_ms": step,
            "rollback_tokens": sequence.context.rollback_tokens, "patterns": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    results = [measure(path, args.context, args.trials) for path in args.models]
    for result in results:
        print(f"{result['model']}: {result['memory']}, a step {result['step_ms']:.1f} ms, "
              f"llama.cpp's rollback {result['rollback_tokens']} tokens")
        for row in result["patterns"]:
            print(f"  drafted {row['drafted']:2}, accepted {row['accepted']}: round {row['round_ms']:.1f} ms, "
                  f"ideal {row['ideal_ms']:.1f} ms, a rejected token {row['rejected_token_steps']:.2f} steps "
                  f"({row['taken_back_by']})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

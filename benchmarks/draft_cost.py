"""What a draft token costs in target steps, and what a verify pass of n tokens costs,
at a realistic context: the two numbers that decide whether drafting can pay.

    python -m benchmarks.draft_cost [DRAFT.gguf ...] [--context 1000] [--preset smol]

The prompt is the first `context` tokens of difflib.py from the standard library. Each
model gets it once, then decodes one token at that position 120 times (the cache cut
back each time); verify passes of 1 to 4 tokens are timed the same way on the target.
Medians. Drafting one token yields (1 + a) / (verify(2) / verify(1) + c) of plain
decoding, with c a draft token's cost in target steps.
"""

import argparse
import statistics
import sysconfig
import time
from pathlib import Path

from completer.config import ModelOptions
from completer.loading import load_pair
from completer.models.llama import LlamaContext, LlamaModel


def median_ms(context: LlamaContext, prompt: list[int], width: int, trials: int) -> float:
    """Median time of evaluating `width` tokens after `prompt`."""
    times = []
    for trial in range(trials):
        context.truncate(len(prompt))
        started = time.perf_counter()
        context.eval(prompt[trial : trial + width], len(prompt), logits_at=list(range(width)))
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("drafts", nargs="*", type=Path, help="draft GGUF files beside the preset's draft")
    parser.add_argument("--context", type=int, default=1000)
    parser.add_argument("--preset", default="smol")
    args = parser.parse_args()
    pair = load_pair(ModelOptions(preset=args.preset, target_gpu_layers=0, draft_gpu_layers=0))
    models = {"target": pair.target, "draft (preset)": pair.draft,
              **{path.name: LlamaModel(path, 0) for path in args.drafts}}
    text = (Path(sysconfig.get_paths()["stdlib"]) / "difflib.py").read_text()
    prompt = models["target"].tokenize(text)[: args.context]
    contexts = {name: LlamaContext(model, n_ctx=len(prompt) + 16) for name, model in models.items()}
    for context in contexts.values():
        context.eval(prompt, 0, logits_at=[-1])

    step = median_ms(contexts["target"], prompt, 1, 120)
    print(f"at {len(prompt)} tokens of context; target step {step:.2f} ms")
    for width in (2, 3, 4):
        print(f"target verify of {width}: {median_ms(contexts['target'], prompt, width, 60) / step:.2f} steps")
    for name, context in contexts.items():
        if name != "target":
            print(f"{name}: a token costs {median_ms(context, prompt, 1, 120) / step:.3f} of a target step")


if __name__ == "__main__":
    main()

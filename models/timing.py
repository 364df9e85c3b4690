"""How fast a model runs here: load time, prefill speed and one decode step."""

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from completer.models.llama import LlamaContext, LlamaModel


@dataclass(frozen=True)
class ModelTiming:
    load_ms: float  # ms, llama.cpp's load from a warm page cache
    prefill_tokens_per_s: float
    decode_ms: float  # ms, median one-token step after the prompt
    prompt_tokens: int
    steps: int


def time_model(path: Path, n_gpu_layers: int | str = "auto", threads: int = 0,
               prompt_tokens: int = 512, steps: int = 32) -> ModelTiming:
    """Load `path`, evaluate a code prompt of `prompt_tokens`, then time `steps` single-token steps."""
    model = LlamaModel(path, n_gpu_layers)
    context = LlamaContext(model, n_ctx=prompt_tokens + steps + 8, n_threads=threads or None)
    # Real code as the prompt: this project's own llama.cpp bindings, repeated to length.
    code = Path(__file__).with_name("llama.py").read_text()
    tokens = model.tokenize(code)
    tokens = (tokens * (prompt_tokens // len(tokens) + 1))[:prompt_tokens]
    started = time.perf_counter()
    logits = context.eval(tokens, 0, logits_at=[-1])[0]
    prefill_s = time.perf_counter() - started
    step_ms = []
    for position in range(prompt_tokens, prompt_tokens + steps):
        started = time.perf_counter()
        logits = context.eval([int(logits.argmax())], position, logits_at=[0])[0]
        step_ms.append((time.perf_counter() - started) * 1000)
    timing = ModelTiming(model.load_ms, prompt_tokens / prefill_s, statistics.median(step_ms), prompt_tokens, steps)
    context.close()
    model.close()
    return timing

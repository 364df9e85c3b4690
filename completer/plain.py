"""Plain greedy decoding with the target alone: the baseline that speculation must match."""

import time
from dataclasses import dataclass

import numpy as np

from models.backend import LlamaContext

# A completion ends at a blank line: the end of the statement or block being written.
BLANK_LINE = "\n\n"


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: list[int]
    prompt_tokens: int
    prefill_ms: float  # ms
    decode_ms: float  # ms, all steps after the prompt


def fit_prompt(tokens: list[int], n_ctx: int, max_tokens: int) -> list[int]:
    """Keep the prompt's last tokens so that the prompt and the answer fit the context."""
    room = max(1, n_ctx - max_tokens)
    return tokens[-room:]


def complete_greedy(context: LlamaContext, prompt: list[int], max_tokens: int, seq: int = 0) -> Completion:
    """Greedy completion of `prompt`, stopping at an end-of-generation token, a blank
    line or `max_tokens`."""
    model = context.model
    prompt = fit_prompt(prompt, context.n_ctx_seq, max_tokens)
    context.truncate(0, seq)
    started = time.perf_counter()
    logits = context.eval(prompt, 0, seq, logits_at=[-1])[0]  # [n_vocab]
    prefill_ms = (time.perf_counter() - started) * 1000
    generated: list[int] = []
    started = time.perf_counter()
    while len(generated) < max_tokens:
        token = int(np.argmax(logits))
        if model.is_end_of_generation(token):
            break
        generated.append(token)
        if BLANK_LINE in model.detokenize(generated):
            break
        logits = context.eval([token], len(prompt) + len(generated) - 1, seq, logits_at=[0])[0]
    decode_ms = (time.perf_counter() - started) * 1000
    text = model.detokenize(generated).split(BLANK_LINE)[0]
    return Completion(text, generated, len(prompt), prefill_ms, decode_ms)

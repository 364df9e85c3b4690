"""Running the modes side by side on holes.

    for each hole, modes in an order rotated per hole (machine drift hits all alike):
        prompt = the session's prompt for the file with the hole's truth taken out (the
                 same for every mode; no healing, which the peer cannot do); prefilled
                 outside the timing
        time `max_tokens` new tokens, no early stop, so every mode makes the same work
        shown = the post-processed text, compared with the hole's truth (its first line
                for line holes, all of it for blocks)
        identical to target's tokens? where not (at T=0), the gap between the two
        tokens that parted, in target's own logits there, says whether it is a near
        tie (numerics) or not; with --exact (one token per target decode) every
        difference is a bug

The peer is llama-cpp-python's own LlamaPromptLookupDecoding(num_pred_tokens=10) on
the same target file, prompts, token budget and temperature.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from completer.bench import MODES, PEER
from completer.bench.holes import Hole
from completer.config import Config, GenerationOptions, PromptOptions
from completer.engine import Engine, generate
from completer.models.backend import LlamaModel, default_threads
from completer.postprocess import CursorContext, postprocess
from completer.session import Completer, CompletionRequest, cursor_offset
from completer.speculative import NEAR_TIE_LOGITS, Sampling, parting_gap

# 128 lines before the cursor: prompts of about 1,000-1,500 tokens, so that each hole's
# prefill (done once per mode family, and again by the peer) stays a few seconds here.
PREFIX_LINES = 128


@dataclass(frozen=True)
class Settings:
    preset: str
    modes: tuple[str, ...] = MODES
    max_tokens: int = 48
    temperature: float = 0.0
    context_tokens: int = 4096
    # The target decodes a verify batch one token per llama_decode, as plain steps do:
    # greedy output must then equal target's exactly, and no difference is a near tie.
    exact: bool = False


class Peer:
    """llama-cpp-python's high-level generator with its prompt-lookup draft."""

    def __init__(self, path: str, n_ctx: int):
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.llm = Llama(path, n_ctx=n_ctx, n_threads=default_threads(), verbose=False, flash_attn=False,
                         draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10), logits_all=True)

    def generate(self, prompt: list[int], max_tokens: int, temperature: float, seed: int,
                 is_end: Callable[[int], bool]) -> tuple[list[int], float]:
        self.llm.reset()
        self.llm.set_seed(seed)
        self.llm.eval(prompt)  # prefill outside the timing, as for our modes; generate() then reuses it
        started = time.perf_counter()
        tokens: list[int] = []
        sampling = {"temp": temperature, "top_k": 1} if temperature <= 0 else {"temp": temperature}
        for token in self.llm.generate(prompt, **sampling):
            if is_end(token) or len(tokens) >= max_tokens:
                break
            tokens.append(token)
        return tokens, (time.perf_counter() - started) * 1000


class Bench:
    """The models, loaded once, and what a run needs to price rounds and check ties."""

    def __init__(self, target: LlamaModel, draft: LlamaModel | None, settings: Settings,
                 distilled: LlamaModel | None = None):
        self.settings = settings
        self.model = target
        self.engine = Engine(target, draft, n_ctx=settings.context_tokens, exact=settings.exact)
        # Mode suffix (":distilled") -> the engine whose draft it runs with.
        self.engines = {"": self.engine}
        if distilled is not None:
            self.engines["distilled"] = Engine(target, distilled, n_ctx=settings.context_tokens, exact=settings.exact)
        config = Config(generation=GenerationOptions(max_tokens=settings.max_tokens),
                        prompt=PromptOptions(prefix_lines=PREFIX_LINES))
        self.completer = Completer(self.engine, config)  # its prompts, as the editor gets them
        self.peer = Peer(str(target.path), settings.context_tokens) if PEER in settings.modes else None

    def prompt(self, hole: Hole) -> tuple[list[int], CursorContext]:
        """The prompt for the file with the hole's truth taken out, and the cursor's context."""
        text = hole.path.read_text(encoding="utf-8", errors="replace")
        offset = cursor_offset(text, hole.line, hole.column)
        if not text.startswith(hole.truth, offset):
            raise ValueError(f"{hole.file} changed since its holes were picked: pick new ones")
        hidden = text[:offset] + text[offset + len(hole.truth):]
        request = CompletionRequest(str(hole.path), hole.file, hidden, offset, hole.language)
        tokens, suffix = self.completer.prompt(request)
        return tokens, CursorContext(hidden[hidden.rfind("\n", 0, offset) + 1 : offset], suffix)

    def run_hole(self, index: int, hole: Hole) -> list[dict]:
        """Every mode on one hole: one record per mode."""
        prompt, cursor = self.prompt(hole)
        modes = list(self.settings.modes)
        order = modes[index % len(modes):] + modes[: index % len(modes)]
        records, logits = {}, {}  # per mode, the target's logits behind its tokens and end token [n, V]
        for mode in order:
            records[mode], logits[mode] = self._run_mode(mode, index, hole, prompt)
            records[mode]["shown"] = postprocess(self.model.detokenize(records[mode]["tokens"]), cursor)
        greedy = self.settings.temperature <= 0
        for mode, record in records.items():
            record["identical"] = "target" in records and record["tokens"] == records["target"]["tokens"]
            if greedy and "target" in records and not record["identical"]:
                # The peer's tokens come without their logits or the end token that stopped them.
                chosen = record["tokens"] if logits[mode] is None else logits[mode].argmax(axis=1)
                record["parting_gap"] = gap = parting_gap(logits["target"], chosen)
                record["near_tie"] = not self.settings.exact and gap is not None and gap < NEAR_TIE_LOGITS
        return [records[mode] for mode in modes]

    def _run_mode(self, mode: str, index: int, hole: Hole, prompt: list[int]) -> tuple[dict, np.ndarray | None]:
        """The mode's record, and the target's logits behind each of its tokens (None for the peer)."""
        base = {"hole": index, "kind": hole.kind, "language": hole.language, "mode": mode, "truth": hole.truth,
                "prompt_tokens": len(prompt)}
        settings = self.settings
        if mode == PEER:
            tokens, ms = self.peer.generate(prompt, settings.max_tokens, settings.temperature, index,
                                            self.model.is_end_of_generation)
            return {**base, "tokens": tokens, "ms": ms}, None
        provider, _, draft = mode.partition(":")
        engine = self.engines[draft]
        engine.prefill(prompt)  # outside the timing
        result = generate(engine, prompt, settings.max_tokens, sampling=Sampling(settings.temperature, seed=index),
                          mode=provider, document=hole.file, language=hole.language, keep_logits=True)
        s = result.stats
        return {**base, "tokens": result.tokens, "ms": s.total_ms, "passes": s.target_passes, "drafted": s.drafted,
                "accepted": s.accepted, "spec_rounds": s.speculative_rounds,
                "spec_tokens": s.tokens_in_speculative_rounds, "predicted": s.predicted_tokens,
                "rounds": [list(r) for r in s.rounds]}, result.logits

"""Typing replay: keystroke to completion with the session's caches, against cold.

    for each file (each one a document of the same Completer):
        the document is opened at a code line in its middle: one completion (full prefill)
        that line is deleted and typed back (its first TYPED_CHARACTERS), a character per
        keystroke, one completion each; halfway, a line 20 lines above is deleted;
        between files, the documents switch (their caches are saved and restored)
    each keystroke: ms to the completion (warm), whether the forward cache answered, and
    the prompt tokens the target's cache lacked; every COLD_EVERY-th keystroke: the same
    request on a second engine with empty caches (cold)
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from completer.bench.metrics import percentile
from completer.bench.run import llama_threads
from completer.config import Config, ContextOptions, GenerationOptions, ModelOptions, PromptOptions
from completer.decoders.local import LocalDecoder
from completer.editor.completer import Completer
from completer.loading import Pair, completer_over, engine_for
from completer.requests import CompletionRequest, Source

TYPED_CHARACTERS = 48
COLD_EVERY = 6  # a cold completion re-evaluates the whole prompt: seconds each, so a sample


@dataclass
class Keystroke:
    ms: float
    source: Source  # MODEL or FORWARD_CACHE
    evaluated: int  # prompt tokens evaluated
    edit: bool  # the keystroke right after deleting a line above


def _timed(completer: Completer, request: CompletionRequest) -> tuple[float, object]:
    started = time.perf_counter()
    completion = completer.complete(request)
    return (time.perf_counter() - started) * 1000, completion


def middle_code_line(text: str) -> tuple[int, int]:
    """(start, end) offsets of the first line from the middle on with 20+ characters of code."""
    offset = text.index("\n", len(text) // 2) + 1
    while offset < len(text):
        end = text.find("\n", offset)
        end = len(text) if end < 0 else end
        line = text[offset:end]
        if len(line.strip()) >= 20 and not line.strip().startswith(("#", "//", '"', "'", "*")):
            return offset, end
        offset = end + 1
    raise ValueError("no line of code to retype after the middle of the file")


def delete_line_above(text: str, cursor: int, lines_up: int = 20) -> tuple[str, int]:
    """The text without the line `lines_up` lines above the cursor's, and the cursor moved."""
    starts = [0] + [i + 1 for i, char in enumerate(text[:cursor]) if char == "\n"]
    if len(starts) <= lines_up:
        return text, cursor
    start, end = starts[-1 - lines_up], starts[-lines_up]
    return text[:start] + text[end:], cursor - (end - start)


def replay_files(pair: Pair, models: ModelOptions, paths: list[Path], roots: Sequence[Path] = (),
                 context: tuple[ContextOptions, PromptOptions] | None = None) -> dict:
    """Typing replayed over the files at `paths`: the summary. `roots` and `context`: as replay's."""
    files = [(str(p), p.read_text(encoding="utf-8", errors="replace"), p.suffix.lstrip(".")) for p in paths]
    return replay(pair, models, files, roots=roots, context=context)[0]


def replay(pair: Pair, models: ModelOptions, files: list[tuple[str, str, str]], max_tokens: int = 16,
           roots: Sequence[Path] = (), context: tuple[ContextOptions, PromptOptions] | None = None
           ) -> tuple[dict, list[Keystroke]]:
    """Replay typing over `files` (path, text, language) on two engines over the pair,
    made with `models`' options (context size, threads), the completers' workspace the
    `roots` with their definitions index built, and `context`'s options (bench's
    --with-context; by default none: no definitions, no open files' chunks); the summary,
    with the threads each engine's contexts ran with (llama_threads), and every keystroke."""
    definitions, prompt = context or (ContextOptions(definitions_tokens=0), PromptOptions(cross_file_tokens=0))
    config = Config(models=models, generation=GenerationOptions(max_tokens=max_tokens, time_budget_ms=0),
                    context=definitions, prompt=prompt)
    warm_engine, pair = engine_for(pair, config)
    cold_engine, _ = engine_for(pair, config, costs=warm_engine.costs)
    warm, cold = (completer_over(LocalDecoder(engine), config, roots) for engine in (warm_engine, cold_engine))
    for completer in (warm, cold):
        completer.repository.build()
    keystrokes: list[Keystroke] = []
    cold_ms: list[float] = []
    for path, text, language in files:
        start, end = middle_code_line(text)
        line = text[start:end][:TYPED_CHARACTERS]
        end = start + len(line)
        text = text[:start] + text[end:]  # the line to type, deleted
        _timed(warm, CompletionRequest(path, path, text, start, language))  # opened: the first, full prefill
        cursor = start
        for i, char in enumerate(line):
            edit = i == len(line) // 2
            if edit:
                text, cursor = delete_line_above(text, cursor)
            text = text[:cursor] + char + text[cursor:]
            cursor += 1
            ms, completion = _timed(warm, CompletionRequest(path, path, text, cursor, language))
            keystrokes.append(Keystroke(ms, completion.source, completion.evaluated_tokens, edit))
            if len(keystrokes) % COLD_EVERY == 0:
                cold.reset()
                cold_ms.append(_timed(cold, CompletionRequest(path, path, text, cursor, language))[0])
    threads = {"typing": llama_threads(warm_engine), "typing:cold": llama_threads(cold_engine)}
    return {**summarize(keystrokes, cold_ms), "threads": threads}, keystrokes


def summarize(keystrokes: list[Keystroke], cold_ms: list[float]) -> dict:
    every = [k.ms for k in keystrokes]
    model = [k for k in keystrokes if k.source == Source.MODEL]
    typing = [k.evaluated for k in model if not k.edit]
    return {
        "keystrokes": len(keystrokes),
        "forward_cache_hits": len(keystrokes) - len(model),
        "cached_p50_ms": percentile(every, 50),
        "cached_p95_ms": percentile(every, 95),
        "cached_model_p50_ms": percentile([k.ms for k in model], 50),
        "cached_model_p95_ms": percentile([k.ms for k in model], 95),
        "cold_p50_ms": percentile(cold_ms, 50),
        "cold_p95_ms": percentile(cold_ms, 95),
        "tokens_per_keystroke": sum(typing) / len(typing) if typing else 0.0,
        "max_tokens_per_keystroke": max(typing, default=0),
        "tokens_after_deleting_a_line_above": [k.evaluated for k in model if k.edit],
    }

"""All options, as one dataclass tree. Each default carries its reason in `doc`.

The same names are used by the CLI flags and (later) the language server's
initializationOptions. README.md's option table is generated from this module
(`python -m completer.config`) and a test keeps the two equal.
"""

from dataclasses import dataclass, field, fields

from models.presets import DEFAULT_PRESET


# Draft mode -> the providers it may use. Every mode still lets the tuner fall back to
# plain target steps where speculating does not pay; `target` never speculates.
DRAFT_MODES: dict[str, tuple[str, ...]] = {
    "auto": ("ngram", "draft"),
    "ngram": ("ngram",),
    "draft": ("draft",),
    "hybrid": ("hybrid",),
    "target": (),
}


def option(default, doc: str, flag: str | None = None):
    return field(default=default, metadata={"doc": doc, "flag": flag})


@dataclass
class ModelOptions:
    preset: str = option(
        DEFAULT_PRESET, "named target/draft pair; `completer models list` shows them", "--preset"
    )
    target: str | None = option(None, "path to a target GGUF, used instead of the preset's", "--target")
    draft: str | None = option(
        None, "path to a draft GGUF, instead of the preset's; it must share the target's vocabulary", "--draft"
    )
    target_gpu_layers: int | str = option(
        "auto", "target layers offloaded to the GPU; `auto` = all when llama.cpp can offload, else 0", "--gpu-layers"
    )
    draft_gpu_layers: int | str = option(
        "auto", "draft layers offloaded to the GPU; the draft is small, so all of it by default", "--draft-gpu-layers"
    )
    context_tokens: int = option(
        4096, "KV cache size in tokens: room for the prompt and the answer on a laptop's memory", "--context"
    )
    threads: int = option(0, "CPU threads for llama.cpp; 0 = every core this process may use", "--threads")


@dataclass
class GenerationOptions:
    max_tokens: int = option(
        64, "most tokens in one completion: a few lines, shown before the user types on", "--max-tokens"
    )
    draft_mode: str = option(
        "auto",
        "who drafts: auto (the tuner picks n-gram lookup, the draft model or plain steps each round), "
        "ngram, draft, hybrid, or target (no speculation)",
        "--mode",
    )
    temperature: float = option(
        0.0, "0 = greedy, the target's most likely text; above 0 samples, exactly as the target would", "--temperature"
    )
    time_budget_ms: float = option(
        1000.0,
        "stop predicting after this many ms (prompt evaluation not counted) and show the whole lines ready, "
        "as llama.vim's t_max_predict_ms: a suggestion later than a second is typed over; 0 = no limit",
        "--time-budget",
    )


@dataclass
class PromptOptions:
    prefix_lines: int = option(
        256, "lines before the cursor in the prompt (llama.vim's n_prefix): the function being written and "
        "what it uses; the window moves in steps of 32 lines so that typing on does not shift the prompt"
    )
    suffix_lines: int = option(
        8, "lines after the cursor. PSM families (all but Codestral) put them after the prefix, so every "
        "keystroke re-evaluates them: 8 lines show what comes next at a bounded cost (`benchmarks/typing.py` "
        "measures it)"
    )
    context_tokens: int = option(
        1024, "tokens of other open files' chunks in the prompt (llama.vim's ring of chunks), newest first; "
        "0 = none. Only files inside the workspace are used"
    )
    chunk_lines: int = option(64, "lines in one chunk of another file, taken around where its cursor last was")
    chunks: int = option(16, "chunks kept in the ring; the oldest goes first, and a near-copy replaces its twin")


@dataclass
class CacheOptions:
    budget_mb: float = option(
        1024.0,
        "memory for the saved KV caches of documents not being completed right now, least recently "
        "used out first; a laptop can spare 1 GB, and a returning document then needs no prefill",
    )


@dataclass
class Config:
    models: ModelOptions = field(default_factory=ModelOptions)
    generation: GenerationOptions = field(default_factory=GenerationOptions)
    prompt: PromptOptions = field(default_factory=PromptOptions)
    cache: CacheOptions = field(default_factory=CacheOptions)


def options_table() -> str:
    """The Markdown table of every option, as README.md shows it."""
    rows = ["| option | CLI flag | default | meaning |", "|---|---|---|---|"]
    for group in fields(Config):
        for item in fields(group.default_factory):
            default = "none" if item.default is None else f"`{item.default}`"
            flag = f"`{item.metadata['flag']}`" if item.metadata["flag"] else ""
            rows.append(f"| `{group.name}.{item.name}` | {flag} | {default} | {item.metadata['doc']} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(options_table())

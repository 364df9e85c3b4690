"""All options, as one dataclass tree. Each default carries its reason in `doc`.

The language server's initializationOptions and the editors' settings use these
names; an option with a `flag` can also be given as that CLI flag. README.md's option
table is generated from this module (`python -m completer.config`) and a test keeps
the two equal.
"""

import types
from dataclasses import dataclass, field, fields, replace
from typing import Any

from completer.models.presets import DEFAULT_PRESET, PRESETS
from completer.prompt import TEMPLATES

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
        None, "path to a draft GGUF, instead of the preset's; it must share the target's vocabulary. "
        "`distilled`: the draft `completer distill` trained for the target", "--draft"
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
    backend: str = option(
        "local", "where decoding runs: local (llama.cpp in this process, on the models above), llama-server (a "
        "llama-server at models.server_url, its own /completion API: its slots, prompt cache and speculative "
        "settings) or openai (an OpenAI-compatible /v1/completions there, as vLLM serves). The prompt, "
        "post-processing and the forward cache stay here either way", "--backend"
    )
    server_url: str = option(
        "", "the server of the llama-server and openai backends, as http://host:port (or https://)",
        "--server-url"
    )
    server_slots: str = option(
        "server", "which of a llama-server's slots (-np) a request takes. server: the server's choice, the idle "
        "slot whose cache shares most with the prompt (a document's own while it lasts), right for a server "
        "several editors share; pin: this editor maps its documents to slots 0, 1, ... least recently used out, "
        "for a server it has to itself (editors pinning the same slots would evict each other's caches)"
    )
    api_key_env: str = option(
        "", "the name of an environment variable holding the server's API key, sent as a bearer token only "
        "over https or to this machine; the key itself never goes in settings, logs or stats. None = no key"
    )
    prompt_family: str = option(
        "auto", "the FIM format of the server's model: auto = from the server (llama-server's vocabulary has the "
        "family's control tokens; for openai, the model's name), else a family by name, or none for a "
        "prefix-only prompt. A family the server's vocabulary lacks is an error"
    )
    server_connect_timeout_s: float = option(
        2.0, "seconds to connect to the server: on a LAN it answers in milliseconds, so a server taking "
        "seconds is down and the editor hears so before the next keystroke"
    )
    server_timeout_s: float = option(
        30.0, "seconds one completion may take on the server, evaluation included: longer is a server in "
        "trouble (generation.time_budget_ms still ends the answer sooner)"
    )
    rpc_servers: str = option(
        "", "llama.cpp RPC servers to offload layers to, as host:port,host:port: each is a ggml-rpc-server "
        "(`completer peers build` builds one) on a machine with a GPU, a device exactly as a local GPU is. "
        "None by default; an address off this machine gets a warning, since llama.cpp's RPC has no "
        "authentication or encryption. One added stays a device until completer restarts", "--rpc"
    )


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
    top_k: int = option(
        0, "above temperature 0, sample among the k most likely tokens only (draft and target alike, so "
        "speculation stays exact); 0 = every token, the target's own distribution"
    )
    top_p: float = option(
        1.0, "above temperature 0, sample among the most likely tokens that hold this much probability "
        "(nucleus sampling); 1 = every token"
    )

    @property
    def speculates(self) -> bool:
        """Whether the draft mode can draft: only then are the draft model and the cost
        of a verify pass loaded and measured."""
        return self.draft_mode != "target"


@dataclass
class PromptOptions:
    prefix_lines: int = option(
        256, "lines before the cursor in the prompt (llama.vim's n_prefix): the function being written and "
        "what it uses; the window moves in steps of 32 lines so that typing on does not shift the prompt"
    )
    suffix_lines: int = option(
        8, "lines after the cursor. PSM families (all but Codestral) put them after the prefix, so every "
        "keystroke re-evaluates them: 8 lines show what comes next at a bounded cost (`python -m "
        "benchmarks.typing` prints it in tokens)"
    )
    context_tokens: int = option(
        1024, "tokens of other open files' chunks in the prompt (llama.vim's ring of chunks), newest first; "
        "0 = none. Only files inside the workspace are used"
    )
    chunk_lines: int = option(64, "lines in one chunk of another file, taken around where its cursor last was")
    chunks: int = option(16, "chunks kept in the ring; the oldest goes first, and a near-copy replaces its twin")
    heal: bool = option(
        True, "token healing: back up over the prompt's last token so that the model re-chooses how the word at "
        "the cursor is split (after `self.cu` it gives `cur_line`, not ` = len(...)`). Above temperature 0 it draws "
        "the first token from the target conditioned on starting with the bytes backed up over; off = exactly the "
        "target's distribution"
    )


@dataclass
class DraftingOptions:
    ngram_min_match: int = option(
        3, "n-gram lookup drafts only after a match of at least this many tokens: on stdlib code, drafting after "
        "matches of 1 to 4 tokens was accepted 19% of the time and ran at 0.68x plain decoding, after 3 to 6 "
        "tokens 44% and 1.11x (smol, T=0)"
    )
    ngram_max_match: int = option(
        64, "matches are measured up to this many tokens: the tuner trusts a long copy further (a match of 32+ "
        "tokens tends to go on), and a default completion is 64 tokens"
    )
    index_mb: float = option(
        256.0, "memory for the workspace index n-gram lookup drafts from (8 bytes a token; the build needs "
        "about 6 times that for a moment): 256 MB holds 33 million tokens, about 110 MB of source (the standard "
        "library's 31 MB made 8.8 million); past it the most recently modified files are kept. 0 = no index: "
        "drafts come from open documents only", "--index-mb"
    )
    tree_branches: int = option(
        2, "where the workspace index's occurrences went on in different ways, verify up to this many of the "
        "runners-up beside the proposal in the same pass (a token tree, at temperature 0), when the tuner "
        "expects them to pay for their rows (at most 4). 0 = one continuation a pass", "--tree-branches"
    )
    hybrid_min_match: int = option(
        5, "hybrid: an n-gram match this long is trusted over the draft model; after a shorter one the draft "
        "model drafts"
    )
    margin: float = option(
        0.05, "speculate only when the tuner's plan beats plain decoding by this share of its speed: the "
        "estimates are noisy, and a wrong yes costs more than a wrong no"
    )
    probe_every: int = option(
        32, "a provider the tuner stopped using gets a one-token round after this many tokens, so that an "
        "estimate gone pessimistic recovers when the text changes"
    )
    probe_max: int = option(1024, "each rejected probe doubles that wait, up to this many tokens: a draft that "
                            "never pays costs ever less")


@dataclass
class CacheOptions:
    budget_mb: float = option(
        1024.0,
        "memory for the saved KV caches of documents not being completed right now, least recently "
        "used out first; a laptop can spare 1 GB, and a returning document then needs no prefill",
    )


@dataclass
class ServerOptions:
    debounce_ms: float = option(
        0.0, "language server: wait this long after a request before generating; a newer request in the "
        "meantime replaces it without touching the model. Editors debounce already, and the newest request "
        "cancels an older generation anyway, so 0"
    )


@dataclass
class Config:
    models: ModelOptions = field(default_factory=ModelOptions)
    generation: GenerationOptions = field(default_factory=GenerationOptions)
    prompt: PromptOptions = field(default_factory=PromptOptions)
    drafting: DraftingOptions = field(default_factory=DraftingOptions)
    cache: CacheOptions = field(default_factory=CacheOptions)
    server: ServerOptions = field(default_factory=ServerOptions)


# Options whose values are one of a set.
# What models.prompt_family may say: found out, a family we format, or no FIM.
PROMPT_FAMILIES = ("auto", *(template.family for template in TEMPLATES), "none")
BACKENDS = ("local", "llama-server", "openai")
SERVER_SLOTS = ("server", "pin")

# Options whose values are one of a set.
CHOICES: dict[str, tuple[str, ...]] = {"models.preset": tuple(PRESETS), "generation.draft_mode": tuple(DRAFT_MODES),
                                       "models.backend": BACKENDS, "models.prompt_family": PROMPT_FAMILIES,
                                       "models.server_slots": SERVER_SLOTS}


def _coerce(name: str, value: Any, kind: Any) -> Any:
    """`value` as the option's type, or ValueError saying what was expected."""
    allowed = set(kind.__args__) if isinstance(kind, types.UnionType) else {kind}
    if value is None and type(None) in allowed:
        return None
    if bool in allowed:  # before the numbers: True is an int to Python, not to JSON
        if isinstance(value, bool):
            return value
        raise ValueError("true or false")
    if str in allowed and isinstance(value, str):
        if name in CHOICES and value not in CHOICES[name]:
            raise ValueError(f"one of {', '.join(CHOICES[name])}")
        if int in allowed and value != "auto":  # a layer count: a number or "auto"
            raise ValueError("a number or \"auto\"")
        return value
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if int in allowed and numeric and float(value).is_integer() and value >= 0:
        return int(value)
    if float in allowed and numeric and value >= 0:
        return float(value)
    expected = " or ".join(sorted(t.__name__ for t in allowed if t is not type(None)))
    raise ValueError(f"a non-negative {expected}" if {int, float} & allowed else f"a {expected}")


def config_from_dict(data: Any, base: Config | None = None) -> tuple[Config, list[str]]:
    """A Config from nested dicts ({"generation": {"max_tokens": 32}}, as editors send
    initializationOptions and settings), on top of `base`. A bad value keeps the default
    and yields a message naming the option, the value and what it should be."""
    config = base or Config()
    problems: list[str] = []
    if not isinstance(data, dict):
        return config, [] if data is None else [f"options must be an object, not {data!r}: using the defaults"]
    groups = {group.name: group for group in fields(Config)}
    for group_name, values in data.items():
        if group_name not in groups:
            problems.append(f"unknown option group {group_name!r}; groups: {', '.join(groups)}")
            continue
        if not isinstance(values, dict):
            problems.append(f"{group_name} must be an object, not {values!r}")
            continue
        current = getattr(config, group_name)
        items = {item.name: item for item in fields(current)}
        changes = {}
        for key, value in values.items():
            name = f"{group_name}.{key}"
            if key not in items:
                problems.append(f"unknown option {name}; {group_name} has {', '.join(items)}")
                continue
            try:
                changes[key] = _coerce(name, value, items[key].type)
            except ValueError as expected:
                problems.append(f"{name} = {value!r} is not {expected}: keeping {getattr(current, key)!r}")
        config = replace(config, **{group_name: replace(current, **changes)})
    return config, problems


def _schema_type(kind: Any) -> str | list[str]:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
    allowed = kind.__args__ if isinstance(kind, types.UnionType) else (kind,)
    return names[kind] if len(allowed) == 1 else [names[t] for t in allowed]


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def settings_schema() -> dict[str, dict[str, Any]]:
    """Every option as a JSON-schema property keyed `group.optionName` (camelCase, as
    editors' settings are named): type, default, choices and the reason beside it. The
    VS Code extension's package.json carries these, and a test keeps the two equal."""
    properties = {}
    for group in fields(Config):
        for item in fields(group.default_factory):
            name = f"{group.name}.{item.name}"
            schema: dict[str, Any] = {"type": _schema_type(item.type), "default": item.default}
            if name in CHOICES:
                schema["enum"] = list(CHOICES[name])
            if schema["type"] in ("integer", "number"):
                schema["minimum"] = 0
            schema["markdownDescription"] = item.metadata["doc"][0].upper() + item.metadata["doc"][1:] + "."
            properties[f"{group.name}.{camel_case(item.name)}"] = schema
    return properties


def options_table() -> str:
    """The Markdown table of every option, as README.md shows it."""
    rows = ["| option | CLI flag | default | meaning |", "|---|---|---|---|"]
    for group in fields(Config):
        for item in fields(group.default_factory):
            default = "none" if item.default in (None, "") else f"`{item.default}`"
            flag = f"`{item.metadata['flag']}`" if item.metadata["flag"] else ""
            rows.append(f"| `{group.name}.{item.name}` | {flag} | {default} | {item.metadata['doc']} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import json
    import sys

    # --settings: the JSON-schema properties for editor extensions' settings.
    print(json.dumps(settings_schema(), indent=2) if sys.argv[1:] == ["--settings"] else options_table())

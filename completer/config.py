"""All options, as one dataclass tree. Each default carries its reason in `doc`.

The language server's initializationOptions and the editors' settings use these
names; an option with a `flag` can also be given as that CLI flag. docs/options.md's
table is generated from this module (`python -m completer.config`) and a test keeps
the two equal.
"""

import types
from dataclasses import dataclass, field, fields, replace
from typing import Any

from completer.models.presets import DEFAULT_PRESET, PRESETS

# Draft mode -> the providers it may use. Every mode still lets the tuner fall back to
# plain target steps where speculating does not pay; `target` never speculates.
DRAFT_MODES: dict[str, tuple[str, ...]] = {
    "auto": ("ngram", "draft"),
    "ngram": ("ngram",),
    "draft": ("draft",),
    "hybrid": ("hybrid",),
    "target": (),
}


def option(default, doc: str, flag: str | None = None, machine: bool = False):
    """A Config field. `machine`: a machine-level option, which only the user's own
    machine may set (the server's command-line flags, so it needs a `flag`; VS Code's
    user settings, which the extension turns into those flags), never the editor's
    settings over LSP: initializationOptions and didChangeConfiguration carry what a
    checked-in workspace file says (VS Code merges .vscode/settings.json in, a Neovim
    project-local config can set them), and the server refuses these there."""
    return field(default=default, metadata={"doc": doc, "flag": flag, "machine": machine})


# Machine-level, because a repository's settings must not choose them:
#   models.decoder, models.server_url  where the prompt, the user's code, is sent;
#   models.api_key_env                 which environment variable's value goes out as a
#                                      bearer token (GITHUB_TOKEN would do);
#   models.rpc_servers                 hosts sent the model's tensors and activations;
#   models.target, models.draft        a file anywhere on disk handed to llama.cpp's GGUF
#                                      parser (a repository could ship a crafted one);
#   context.exclude                    which files are never read: a repository that could
#                                      narrow it would have its keys read into a prompt.
# The rest are not: models.preset names a pair from the fixed table, downloaded from the
# configured Hub; sizes, timeouts and sampling cost time or memory, not trust, and each
# is validated when it loads.


@dataclass(frozen=True)
class ModelOptions:
    preset: str = option(
        DEFAULT_PRESET, "named target/draft pair; `completer models list` shows them", "--preset"
    )
    target: str | None = option(
        None, "a target GGUF used instead of the preset's: a path, or a model `completer models list` found on this "
        "machine (`ollama:qwen2.5-coder:1.5b-base`, `lmstudio:...`, `hf:...`); it runs without a draft unless "
        "models.draft names one", "--target", machine=True)
    draft: str | None = option(
        None, "a draft GGUF instead of the preset's (a path or a found model's name); it must share the target's "
        "vocabulary. `auto`: the smallest model found on this machine that does; `distilled`: the draft `completer "
        "distill` trained for the target", "--draft", machine=True
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
    decoder: str = option(
        "local", "where decoding runs: local (llama.cpp in this process, on the models above), llama-server (a "
        "llama-server at models.server_url, its own /completion API: its slots, prompt cache and speculative "
        "settings) or openai (an OpenAI-compatible /v1/completions there, as vLLM serves). The prompt, "
        "post-processing and the forward cache stay here either way. Its old name, models.backend (flag "
        "--backend), is still taken, with a warning", "--decoder", machine=True
    )
    server_url: str = option(
        "", "the server of the llama-server and openai decoders, as http://host:port (or https://)",
        "--server-url", machine=True
    )
    server_slots: str = option(
        "server", "which of a llama-server's slots (-np) a request takes. server: the server's choice, the idle "
        "slot whose cache shares most with the prompt (a document's own while it lasts), right for a server "
        "several editors share; pin: this editor maps its documents to slots 0, 1, ... least recently used out, "
        "for a server it has to itself (editors pinning the same slots would evict each other's caches)"
    )
    api_key_env: str = option(
        "", "the name of an environment variable holding the server's API key, sent as a bearer token only "
        "over https or to this machine; the key itself never goes in settings, logs or stats. None = no key",
        "--api-key-env", machine=True
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
        "(`completer build` builds one) on a machine with a GPU, a device exactly as a local GPU is. "
        "None by default; an address off this machine gets a warning, since llama.cpp's RPC has no "
        "authentication or encryption. One taken out of the list gets no layers from the next load on", "--rpc",
        machine=True
    )


@dataclass(frozen=True)
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
    candidates: int = option(
        1, "suggestions offered at once, as llama.vim's n_cmpl: the completion, and others that part from it "
        "where the target's two most likely tokens were close, each greedy after its first token (one batch a "
        "round decodes them all); the editor cycles through them. The local engine only: a server decoder offers one",
    )

    @property
    def speculates(self) -> bool:
        """Whether the draft mode can draft: only then are the draft model and the cost
        of a verify pass loaded and measured."""
        return self.draft_mode != "target"

    @property
    def needs_draft_model(self) -> bool:
        """Whether the draft mode drafts with a draft model alone: without one it could
        only run plain steps (auto falls back on n-gram, workspace and copy drafting)."""
        return "ngram" not in DRAFT_MODES[self.draft_mode] and self.speculates


@dataclass(frozen=True)
class PromptOptions:
    prefix_lines: int = option(
        256, "lines before the cursor in the prompt (llama.vim's n_prefix): the function being written and "
        "what it uses; the window moves in steps of 32 lines so that typing on does not shift the prompt"
    )
    suffix_lines: int = option(
        8, "lines after the cursor. PSM families (all but Codestral) put them after the prefix, so every "
        "keystroke re-evaluates them: 8 lines show what comes next at a bounded cost (`python -m "
        "benchmarks.keystrokes` prints it in tokens)"
    )
    cross_file_tokens: int = option(
        1024, "tokens of other open files' chunks in the prompt (llama.vim's ring of chunks), newest first; "
        "0 = none. Only files inside the workspace are used. Its old name, prompt.context_tokens, is still "
        "taken, with a warning"
    )
    chunk_lines: int = option(64, "lines in one chunk of another file, taken around where its cursor last was")
    chunks: int = option(16, "chunks kept in the ring; the oldest goes first, and a near-copy replaces its twin")
    heal: bool = option(
        True, "token healing: back up over the prompt's last token so that the model re-chooses how the word at "
        "the cursor is split (after `self.cu` it gives `cur_line`, not ` = len(...)`). Above temperature 0 it draws "
        "the first token from the target conditioned on starting with the bytes backed up over; off = exactly the "
        "target's distribution"
    )


# Files never read, into a prompt or an index: secrets' usual names (keys, certificates,
# .env files, credentials). context.exclude's default; the definitions index's too.
DEFAULT_EXCLUDE = (
    ".env*", "*.env", "*.pem", "*.key", "id_*", "secrets.*", "credentials*", ".git-credentials", "*.p12", "*.pfx",
    "*.jks", "*.keystore", ".netrc", ".npmrc", ".pypirc",
)


@dataclass(frozen=True)
class ContextOptions:
    exclude: str = option(
        ",".join(DEFAULT_EXCLUDE), "files never read, into a prompt or an index (the workspace and definitions "
        "indexes, other files' chunks): glob patterns, comma-separated, each matched against every part of a path "
        "relative to its workspace folder (one with a `/` against the whole path), ignoring case; a folder that "
        "matches excludes what it holds. The default names keys, certificates, .env files and credentials. A value "
        "replaces the default: to add a pattern, give the default's too", "--exclude", machine=True
    )
    definitions_tokens: int = option(
        512, "tokens of other files' definitions in the inline prompt: those of the names the code at the cursor "
        "uses, found by the definitions index; 0 = none. With a model as small as smol or gemma3-270m, 0 completes "
        "better: on held-out cross-file holes the definitions lowered their identifier match (docs/bench.md)"
    )
    definitions_mb: float = option(
        64.0, "memory for the definitions index (every definition in the workspace's source files, by name): a "
        "generated 5,000-file workspace took 43 MB, the Python standard library 52 MB. Past it, a file is kept "
        "without its definitions' bodies, then left out"
    )

    @property
    def exclude_patterns(self) -> tuple[str, ...]:
        """`exclude` as its patterns, blanks left out."""
        return tuple(pattern.strip() for pattern in self.exclude.split(",") if pattern.strip())


@dataclass(frozen=True)
class DraftingOptions:
    ngram_min_match: int = option(
        3, "n-gram lookup drafts only after a match of at least this many tokens: on stdlib code, drafting after "
        "matches of 1 to 4 tokens was accepted 19% of the time, after 3 to 6 tokens 44% (smol, T=0)"
    )
    ngram_max_match: int = option(
        64, "matches are measured up to this many tokens: the tuner trusts a long copy further (a match of 32+ "
        "tokens tends to go on), and a default completion is 64 tokens"
    )
    index_mb: float = option(
        256.0, "memory for the n-gram indexes lookup drafts from: seven eighths for the workspace index (8 bytes a "
        "token; the build needs about 6 times that for a moment): 224 MB holds 29 million tokens, about 100 MB of "
        "source (the standard library's 31 MB made 8.8 million), past it the most recently modified files kept; "
        "an eighth for files saved since it was built, the least recently used dropped first. 0 = no index: "
        "drafts come from open documents only", "--index-mb"
    )
    tree_branches: int = option(
        2, "where the workspace index's occurrences went on in different ways, or a rewrite's end occurs twice in "
        "the text it copies (copy drafting), verify up to this many of the runners-up beside the proposal in the "
        "same pass (a token tree, at temperature 0), when the tuner expects them to pay for their rows (at most "
        "4). 0 = one continuation a pass", "--tree-branches"
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


@dataclass(frozen=True)
class CacheOptions:
    budget_mb: float = option(
        1024.0,
        "memory for the saved KV caches of documents not being completed right now, least recently "
        "used out first; a laptop can spare 1 GB, and a returning document then needs no prefill",
    )
    checkpoint_mb: float = option(
        256.0,
        "models with recurrent layers (hybrid or recurrent: Qwen3.5, Granite 4.0-H, Mamba-2), whose state cannot "
        "be cut back to where an edit is: memory for copies of the live document's state at the lines around "
        "the last edit and the prompt's end, so that an edit evaluates the text from the nearest copy before it, "
        "not the whole prompt. The target's and a recurrent draft model's copies share it: past it, the one "
        "holding more loses its oldest. Each copy is one recurrent state: 20 to 52 MB at half a billion "
        "parameters (random qwen35, granitehybrid and mamba2 of those shapes). Lowered, what is over it is freed "
        "at once. 0 = no copies: every edit re-reads the prompt",
    )


@dataclass(frozen=True)
class LanguageServerOptions:
    debounce_ms: float = option(
        0.0, "language server: wait this long after a request before generating; a newer request in the "
        "meantime replaces it without touching the model. Editors debounce already, and the newest request "
        "cancels an older generation anyway, so 0. lsp.back_off lengthens it on a shared server"
    )
    prefetch: bool = option(
        True, "language server: while an inline completion that ends its line is shown, compute the one that "
        "follows its acceptance, so that after Tab the next one is there with no model call (as llama.vim "
        "does). Whole acceptance only; any other request stops it within a round"
    )
    back_off: bool = option(
        True, "language server, on a shared server (--decoder llama-server or openai): while the server gives "
        "this editor half its unloaded speed or less, the debounce grows to half the median latency of the "
        "last 8 answers (at most 1000 ms) and prefetch waits (docs/team-server.md)"
    )


@dataclass(frozen=True)
class NextEditOptions:
    lines_above: int = option(
        8, "next edit: lines of the editable region above the cursor's line (the model writes the region again "
        "with the user's next edit made in it)")
    lines_below: int = option(12, "next edit: lines of the editable region below the cursor's line")
    context_lines: int = option(
        16, "next edit: lines of the file shown on each side of the region, which the model reads and does not rewrite")
    history_tokens: int = option(
        512, "next edit: the recent edits the prompt shows (each document's changes as a diff, oldest first), at "
        "most this many tokens counted as characters / 3 (as Zed counts them); the oldest go first")
    cross_file_tokens: int = option(
        512, "next edit: tokens of other open files' chunks in the prompt (the inline prompt's ring), newest first, "
        "for the formats whose model reads them (all but `zeta`: Zeta's prompt has none); 0 = "
        "none. They give way first when the prompt does not fit")
    format: str = option(
        "auto", "next edit: the prompt format, by model family: `instruction` (any instruct model: the smol pair), "
        "`zeta` (Zed's Zeta), `sweep` (Sweep's next-edit model), `instinct` (Continue's Instinct, a target of one's "
        "own), or `auto`: the preset's (`zeta` and `sweep` for those presets; `instruction` for the others and for a "
        "target of one's own)", flag="--edit-format")


@dataclass(frozen=True)
class Config:
    models: ModelOptions = field(default_factory=ModelOptions)
    generation: GenerationOptions = field(default_factory=GenerationOptions)
    prompt: PromptOptions = field(default_factory=PromptOptions)
    context: ContextOptions = field(default_factory=ContextOptions)
    drafting: DraftingOptions = field(default_factory=DraftingOptions)
    cache: CacheOptions = field(default_factory=CacheOptions)
    lsp: LanguageServerOptions = field(default_factory=LanguageServerOptions)
    edits: NextEditOptions = field(default_factory=NextEditOptions)


# Where decoding runs (models.decoder): the one list of their names. loading maps each to
# what loads its decoder.
LOCAL, LLAMA_SERVER, OPENAI = "local", "llama-server", "openai"
SERVER_DECODERS = (LLAMA_SERVER, OPENAI)
DECODERS = (LOCAL, *SERVER_DECODERS)
# The FIM families prompt.TEMPLATES formats and the next-edit formats editor.next_edit
# writes, named here so that the options import no code that formats prompts
# (tests/lsp/test_options.py keeps each list equal to what it names).
FIM_FAMILIES = ("qwen2.5-coder", "deepseek-coder", "starcoder", "codellama", "codestral")
EDIT_FORMATS = ("instruction", "zeta", "sweep", "instinct")
# What models.prompt_family may say: found out, a family we format, or no FIM.
PROMPT_FAMILIES = ("auto", *FIM_FAMILIES, "none")
SERVER_SLOTS = ("server", "pin")

# Options whose values are one of a set.
CHOICES: dict[str, tuple[str, ...]] = {"models.preset": tuple(PRESETS), "generation.draft_mode": tuple(DRAFT_MODES),
                                       "models.decoder": DECODERS, "models.prompt_family": PROMPT_FAMILIES,
                                       "models.server_slots": SERVER_SLOTS, "edits.format": ("auto", *EDIT_FORMATS)}

# Options still taken under an old name, old -> new, in their group or another. The old
# name gets a warning naming the new one; both given with different values, neither is
# taken. `server.*` was the language server's group beside `models.server_*`, the
# decoding server's; models.backend named what the code calls a decoder.
RENAMED: dict[str, str] = {"prompt.context_tokens": "prompt.cross_file_tokens", "models.backend": "models.decoder",
                           "server.debounce_ms": "lsp.debounce_ms", "server.prefetch": "lsp.prefetch"}
# The CLI flags of RENAMED's options that had one, old -> new: taken, with the same warning.
RENAMED_FLAGS: dict[str, str] = {"--backend": "--decoder"}

# llama.cpp and llama-server read counts as C ints: no count option goes past this.
INT_MAX = 2**31 - 1
# Tokens the prompt needs besides the answer, at the least: the file's path and about 27
# lines before the cursor (smol's vocabulary made 9.0 tokens a line of Python's standard
# library, the median over its 158 modules of 50 lines or more; 10.6 at the 90th
# percentile). Less is a prompt that cannot say what is being written.
MIN_PROMPT_TOKENS = 256
# Each numeric option's smallest and largest value, inclusive, and why; one not named
# here takes 0 to INT_MAX. How options bound each other is `conflicts`.
RANGES: dict[str, tuple[float, float]] = {
    # A minimal prompt and one token; past the longest context of a preset's model
    # (Qwen2.5-Coder: 32,768 trained, 131,072 with YaRN) the KV cache is memory spent.
    "models.context_tokens": (MIN_PROMPT_TOKENS + 2, 131_072),
    "models.threads": (0, 1024),  # more than any CPU's cores: threads that only contend
    # 0 s is a connect that never waits, so it always fails; a minute is a server down.
    "models.server_connect_timeout_s": (0.01, 60.0),
    "models.server_timeout_s": (0.1, 3600.0),
    "generation.max_tokens": (1, INT_MAX),  # 0 answers nothing; the most: what models.context_tokens leaves
    "generation.temperature": (0.0, 10.0),  # far above 1 the distribution is near uniform: noise
    "generation.time_budget_ms": (0.0, 600_000.0),  # 0 = no limit; past 10 minutes no user still waits
    "generation.top_p": (0.0, 1.0),  # a probability
    "generation.candidates": (1, 5),  # the completion and engine.MAX_TREE_BRANCHES branches beside it
    "prompt.chunk_lines": (3, INT_MAX),  # ChunkRing.add drops a chunk with fewer than 3 lines of code
    "context.definitions_mb": (0.0, 1_048_576.0),
    "drafting.ngram_min_match": (1, INT_MAX),  # a match of 0 tokens is everywhere
    "drafting.hybrid_min_match": (1, INT_MAX),
    "drafting.tree_branches": (0, 4),  # engine.MAX_TREE_BRANCHES: the sequences the target's context has
    "drafting.probe_every": (1, INT_MAX),  # 0 would probe every token
    "drafting.margin": (0.0, 1.0),  # a share of plain decoding's speed
    "drafting.index_mb": (0.0, 1_048_576.0),  # 1 TB: beyond, bytes overflow what the budget is counted in
    "cache.budget_mb": (0.0, 1_048_576.0),
    "cache.checkpoint_mb": (0.0, 1_048_576.0),
    "lsp.debounce_ms": (0.0, 10_000.0),  # after 10 s the user has typed on: the answer would be thrown away
    "edits.lines_above": (0, 200),  # a region is rewritten whole: 400 lines are minutes of decoding
    "edits.lines_below": (0, 200),
    "edits.context_lines": (0, 10_000),
    "edits.history_tokens": (0, INT_MAX),
}
# Options where 0 is off and a value above it must be at least this. A temperature below
# 0.001 samples as greedy decoding does, and below about 1e-306 logits / T overflow: smol
# at 5e-324 wrote its last vocabulary token over and over.
SMALLEST_ABOVE_ZERO: dict[str, float] = {"generation.temperature": 0.001}


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _brief(value: Any) -> str:
    """`value` as a message quotes it: a hostile 1 MB string is not echoed whole."""
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:120]}... ({len(text)} characters)"


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
    if numeric and {int, float} & allowed:
        # Compared as Python numbers: a 400-digit int or NaN (JSON as Python reads it) is
        # out of range here, and float() of the int would raise OverflowError.
        whole = isinstance(value, int) or value.is_integer()
        low, high = RANGES.get(name, (0, INT_MAX))
        smallest = SMALLEST_ABOVE_ZERO.get(name, 0)
        if not (whole or float in allowed) or not low <= value <= high or 0 < value < smallest:
            number = "a number" if float in allowed else "a whole number"
            span = f"{number} from {_number(low)}" if not smallest else f"0 or {number} from {_number(smallest)}"
            raise ValueError(f"{span} to {_number(high)}")
        return float(value) if float in allowed else int(value)
    expected = " or ".join(sorted(t.__name__ for t in allowed if t is not type(None)))
    raise ValueError(f"a non-negative {expected}" if {int, float} & allowed else f"a {expected}")


def config_from_dict(data: Any, base: Config | None = None) -> tuple[Config, list[str]]:
    """A Config from nested dicts ({"generation": {"max_tokens": 32}}, as editors send
    initializationOptions and settings), on top of `base`. A bad value keeps the value
    it had and yields a message naming the option, the value and what it should be; so
    do values that each fit but cannot work together (`conflicts`): those that changed
    keep the values they had."""
    config = base or Config()
    if not isinstance(data, dict):
        return config, [] if data is None else [f"options must be an object, not {_brief(data)}: using the defaults"]
    data, problems = _under_new_names(data, config)
    groups = {group.name: group for group in fields(Config)}
    for group_name, values in data.items():
        if group_name not in groups:
            problems.append(f"unknown option group {_brief(group_name)}; groups: {', '.join(groups)}")
            continue
        if not isinstance(values, dict):
            problems.append(f"{group_name} must be an object, not {_brief(values)}")
            continue
        current = getattr(config, group_name)
        items = {item.name: item for item in fields(current)}
        changes = {}
        for key, value in values.items():
            name = f"{group_name}.{key}"
            if key not in items:
                problems.append(f"unknown option {group_name}.{_brief(key)}; {group_name} has {', '.join(items)}")
                continue
            try:
                changes[key] = _coerce(name, value, items[key].type)
            except ValueError as expected:
                problems.append(f"{name} = {_brief(value)} is not {expected}: keeping {getattr(current, key)!r}")
        config = replace(config, **{group_name: replace(current, **changes)})
    config, kept = _without_conflicts(config, base or Config())
    return config, problems + kept


def _under_new_names(data: dict, config: Config) -> tuple[dict, list[str]]:
    """`data` with each old name (RENAMED) given under its new one, in its new group, and
    a message for each: a warning naming the new name or, when both names are given with
    different values, why neither is taken (`config` keeps its value). A null under an
    old name is no value: VS Code sends its deprecated setting, unset, as null. A group
    left empty that is no group of Config's any more (`server`) goes. The old name of a
    machine-level option is not taken: config_from_dict reads what an editor sends, which
    a workspace's settings may choose, and the language server refuses the new name there
    before it gets here (see `option`)."""
    data, messages = {name: dict(values) if isinstance(values, dict) else values for name, values in data.items()}, []
    for old, new in RENAMED.items():
        (old_group, old_key), (new_group, new_key) = old.split("."), new.split(".")
        values = data.get(old_group)
        if not isinstance(values, dict) or old_key not in values:
            continue
        value = values.pop(old_key)
        if not values and old_group not in {group.name for group in fields(Config)}:
            del data[old_group]
        if value is not None and new in machine_options():
            messages.append(f"{old} is the old name of {new}, a machine-level option, which only the server's flag "
                            f"sets (`completer serve --stdio {machine_options()[new]} ...`): not taken here")
            continue
        target = data.setdefault(new_group, {})
        if value is None or not isinstance(target, dict):  # not a group: config_from_dict says so
            continue
        if new_key in target and target[new_key] != value:
            messages.append(f"{old} = {_brief(value)} and {new} = {_brief(target.pop(new_key))} are one option, "
                            f"under its old name and its new one, given two values: set {new} alone; keeping "
                            f"{_option(config, new)!r}")
        else:
            target[new_key] = value
            messages.append(f"{old} is deprecated: its value is read as {new}, its new name; rename it where "
                            "it is set")
    return data, messages


def conflicts(config: Config) -> list[tuple[tuple[str, ...], str]]:
    """Options whose values each fit but cannot work together: for each rule broken,
    the options it relates and why, naming them all."""
    models, generation, prompt, drafting = config.models, config.generation, config.prompt, config.drafting
    found = []
    room = models.context_tokens - generation.max_tokens - 1  # the prompt's, as the completers leave it
    if room < MIN_PROMPT_TOKENS:
        found.append((("generation.max_tokens", "models.context_tokens"),
                      f"generation.max_tokens {generation.max_tokens} leaves {max(room, 0)} tokens of "
                      f"models.context_tokens {models.context_tokens} for the prompt, which needs {MIN_PROMPT_TOKENS}"))
    elif prompt.cross_file_tokens > room - MIN_PROMPT_TOKENS:
        found.append((("prompt.cross_file_tokens", "generation.max_tokens", "models.context_tokens"),
                      f"prompt.cross_file_tokens {prompt.cross_file_tokens} of other files' chunks leave less than "
                      f"{MIN_PROMPT_TOKENS} tokens for the file's own lines in models.context_tokens "
                      f"{models.context_tokens} less generation.max_tokens {generation.max_tokens}"))
    if drafting.ngram_max_match < drafting.ngram_min_match:
        found.append((("drafting.ngram_max_match", "drafting.ngram_min_match"),
                      f"drafting.ngram_max_match {drafting.ngram_max_match} is below drafting.ngram_min_match "
                      f"{drafting.ngram_min_match}: no match could be measured"))
    if drafting.hybrid_min_match > drafting.ngram_max_match:
        found.append((("drafting.hybrid_min_match", "drafting.ngram_max_match"),
                      f"drafting.hybrid_min_match {drafting.hybrid_min_match} is above drafting.ngram_max_match "
                      f"{drafting.ngram_max_match}: matches are measured only that far, so none would be trusted"))
    if drafting.probe_max < drafting.probe_every:
        found.append((("drafting.probe_max", "drafting.probe_every"),
                      f"drafting.probe_max {drafting.probe_max} is below drafting.probe_every {drafting.probe_every}"))
    if models.server_connect_timeout_s > models.server_timeout_s:
        found.append((("models.server_connect_timeout_s", "models.server_timeout_s"),
                      f"models.server_connect_timeout_s {models.server_connect_timeout_s} is above "
                      f"models.server_timeout_s {models.server_timeout_s}, the whole request's"))
    return found


def problems(config: Config) -> list[str]:
    """What is wrong with a Config made in code (the CLI's flags): each value out of its
    range, then each rule of `conflicts` broken. config_from_dict's Configs have none."""
    found = []
    for group in fields(Config):
        for item in fields(group.default_factory):
            name, value = f"{group.name}.{item.name}", getattr(getattr(config, group.name), item.name)
            try:
                _coerce(name, value, item.type)
            except ValueError as expected:
                found.append(f"{name} = {_brief(value)} is not {expected}")
    return found + [why for _, why in conflicts(config)]


def _option(config: Config, name: str) -> Any:
    group, key = name.split(".")
    return getattr(getattr(config, group), key)


def _with_option(config: Config, name: str, value: Any) -> Config:
    group, key = name.split(".")
    return replace(config, **{group: replace(getattr(config, group), **{key: value})})


def _without_conflicts(config: Config, base: Config) -> tuple[Config, list[str]]:
    """`config` with each broken rule's changed options back at `base`'s values, and a
    message for each. Should `base` itself break a rule (a Config made in code), the
    options of that rule take their defaults, which break none (tests/lsp/test_options.py)."""
    config, kept = _settle(config, base, "keeping")
    config, defaults = _settle(config, Config(), "using the default")
    return config, kept + defaults


def _settle(config: Config, towards: Config, kept_as: str) -> tuple[Config, list[str]]:
    """Until no broken rule has an option that differs from `towards`, set those options
    to its values. Options only ever move to `towards`, so this ends."""
    messages = []
    while True:
        for names, why in conflicts(config):
            changed = [name for name in names if _option(config, name) != _option(towards, name)]
            if changed:
                break
        else:
            return config, messages
        for name in changed:
            config = _with_option(config, name, _option(towards, name))
        messages.append(f"{why}: {kept_as} " + ", ".join(f"{name} {_option(config, name)!r}" for name in changed))


def machine_options() -> dict[str, str]:
    """`group.option` -> its CLI flag, for every machine-level option (see `option`)."""
    return {f"{group.name}.{item.name}": item.metadata["flag"] for group in fields(Config)
            for item in fields(group.default_factory) if item.metadata["machine"]}


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
            if item.metadata["machine"]:  # VS Code ignores it in workspace and folder settings
                schema["scope"] = "machine"
                schema["markdownDescription"] += " Machine-level: set only in your user settings, never a workspace's."
            properties[setting_name(name)] = schema
            for old in (old for old, new in RENAMED.items() if new == name):
                properties[setting_name(old)] = _deprecated_setting(name, schema)
    return properties


def setting_name(name: str) -> str:
    """`group.option_name` as editors' settings are named: `group.optionName`."""
    group, key = name.split(".")
    return f"{group}.{camel_case(key)}"


def _deprecated_setting(new: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The setting under an old name of `new` (RENAMED), whose schema is `schema`. Its
    default is null, which the server reads as unset: VS Code sends every declared
    setting, and an old name's default would otherwise be a value."""
    kinds = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
    use = f"completer.{setting_name(new)}"
    setting = {"type": [*kinds, "null"], "default": None,
               "markdownDescription": f"The old name of `{use}`, still taken with a warning; null = unset.",
               "deprecationMessage": f"Renamed: use {use}."}
    if "scope" in schema:  # a machine-level option's: under its old name a workspace may not choose it either
        setting["scope"] = schema["scope"]
    return setting


def options_table() -> str:
    """The Markdown table of every option, as docs/options.md shows it."""
    rows = ["| option | CLI flag | default | set by | meaning |", "|---|---|---|---|---|"]
    for group in fields(Config):
        for item in fields(group.default_factory):
            default = "none" if item.default in (None, "") else f"`{item.default}`"
            flag = f"`{item.metadata['flag']}`" if item.metadata["flag"] else ""
            scope = "machine" if item.metadata["machine"] else "any"
            rows.append(f"| `{group.name}.{item.name}` | {flag} | {default} | {scope} | {item.metadata['doc']} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import json
    import sys

    # --settings: the JSON-schema properties for editor extensions' settings.
    print(json.dumps(settings_schema(), indent=2) if sys.argv[1:] == ["--settings"] else options_table())

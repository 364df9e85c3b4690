"""A GGUF model's forward pass in torch, as llama.cpp computes it: what `completer
distill` trains a draft with (models/distill.py). Needs the `distill` extra (torch).

The llama architecture in the style of gpt-fast's model.py: RMSNorm, rotary position
embeddings with the file's frequency base, grouped-query attention, a SwiGLU
feed-forward, an output head (tied to the embeddings when the file has none). Qwen2
is the same with biases on q, k and v and NeoX-style rotation. Modules are named
after the GGUF tensors (`layers.3.attn_q.weight` is `blk.3.attn_q.weight`), so
trained weights go back into a GGUF file by name.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
from torch import nn

from completer.models.errors import ModelError
from completer.models.gguf_file import GGUFContents, TensorLocation, read_gguf

# Architectures whose files this module reads -> whether llama.cpp rotates the two
# halves of each head (NeoX) rather than adjacent pairs. The converter already
# permuted llama's q/k weights for adjacent pairs.
ARCHITECTURES = {"llama": False, "qwen2": True}


@dataclass(frozen=True)
class ModelArgs:
    architecture: str
    n_layer: int
    dim: int
    n_head: int
    n_kv_head: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    rope_base: float
    norm_eps: float
    qkv_bias: bool
    tied_output: bool

    @staticmethod
    def from_gguf(contents: GGUFContents, n_layer: int | None = None) -> "ModelArgs":
        architecture = contents.get("general.architecture")
        if architecture not in ARCHITECTURES:
            raise ModelError(f"{contents.path}: distillation reads {', '.join(ARCHITECTURES)} models, "
                             f"not {architecture!r}.")
        key = lambda name, default=None: contents.get(f"{architecture}.{name}", default)  # noqa: E731
        tensors = {tensor.name: tensor for tensor in contents.tensors}
        dim, n_head = key("embedding_length"), key("attention.head_count")
        head_dim = key("attention.key_length", dim // n_head)
        if key("rope.dimension_count", head_dim) != head_dim:
            raise ModelError(f"{contents.path}: partial rotary embeddings are not supported.")
        total = key("block_count")
        return ModelArgs(
            architecture=architecture,
            n_layer=total if n_layer is None else n_layer,
            dim=dim,
            n_head=n_head,
            n_kv_head=key("attention.head_count_kv", n_head),
            head_dim=head_dim,
            ffn_dim=key("feed_forward_length"),
            vocab_size=tensors["token_embd.weight"].shape[1],
            rope_base=key("rope.freq_base", 10000.0),
            norm_eps=key("attention.layer_norm_rms_epsilon"),
            qkv_bias="blk.0.attn_q.bias" in tensors,
            tied_output="output.weight" not in tensors,
        )


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(args: ModelArgs, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's angles, [length, head_dim / 2]."""
    inverse = args.rope_base ** (-torch.arange(0, args.head_dim, 2, dtype=torch.float64) / args.head_dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float64), inverse)
    return angles.cos().float(), angles.sin().float()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """x: [B, T, heads, head_dim], rotated by position."""
    if neox:
        first, second = x.chunk(2, dim=-1)
    else:
        first, second = x[..., 0::2], x[..., 1::2]
    cos, sin = cos[:, None, :], sin[:, None, :]  # [T, 1, head_dim / 2]
    rotated_first, rotated_second = first * cos - second * sin, first * sin + second * cos
    if neox:
        return torch.cat((rotated_first, rotated_second), dim=-1)
    return torch.stack((rotated_first, rotated_second), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.attn_norm = RMSNorm(args.dim, args.norm_eps)
        self.attn_q = nn.Linear(args.dim, args.n_head * args.head_dim, bias=args.qkv_bias)
        self.attn_k = nn.Linear(args.dim, args.n_kv_head * args.head_dim, bias=args.qkv_bias)
        self.attn_v = nn.Linear(args.dim, args.n_kv_head * args.head_dim, bias=args.qkv_bias)
        self.attn_output = nn.Linear(args.n_head * args.head_dim, args.dim, bias=False)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_gate = nn.Linear(args.dim, args.ffn_dim, bias=False)
        self.ffn_up = nn.Linear(args.dim, args.ffn_dim, bias=False)
        self.ffn_down = nn.Linear(args.ffn_dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        args, (batch, length, _) = self.args, x.shape
        h = self.attn_norm(x)
        neox = ARCHITECTURES[args.architecture]
        q = rotate(self.attn_q(h).view(batch, length, args.n_head, args.head_dim), cos, sin, neox)
        k = rotate(self.attn_k(h).view(batch, length, args.n_kv_head, args.head_dim), cos, sin, neox)
        v = self.attn_v(h).view(batch, length, args.n_kv_head, args.head_dim)
        attended = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True,
            scale=1 / math.sqrt(args.head_dim),
        )  # [B, heads, T, head_dim]
        x = x + self.attn_output(attended.transpose(1, 2).reshape(batch, length, -1))
        h = self.ffn_norm(x)
        return x + self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.token_embd = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(Block(args) for _ in range(args.n_layer))
        self.output_norm = RMSNorm(args.dim, args.norm_eps)
        self.output = None if args.tied_output else nn.Linear(args.dim, args.vocab_size, bias=False)

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> the final norm's output [B, T, dim]."""
        x = self.token_embd(tokens)
        cos, sin = rope_tables(self.args, tokens.shape[1])
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output_norm(x)

    def head_weight(self) -> torch.Tensor:
        return self.token_embd.weight if self.output is None else self.output.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> logits [B, T, vocab]."""
        return F.linear(self.hidden(tokens), self.head_weight())

    def gguf_tensors(self) -> dict[str, torch.Tensor]:
        """Every parameter under its GGUF tensor name."""
        return {gguf_name(name): value for name, value in self.state_dict().items()}


def gguf_name(parameter: str) -> str:
    return parameter.replace("layers.", "blk.", 1) if parameter.startswith("layers.") else parameter


def read_tensor(path: Path, tensor: TensorLocation) -> np.ndarray:
    """A tensor of the file as float32, in numpy order (rows last: [ne1, ne0])."""
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=tensor.offset, shape=(tensor.n_bytes,))
    shape = tuple(reversed(tensor.shape))
    if tensor.type == GGMLQuantizationType.F32:
        return np.array(raw.view(np.float32).reshape(shape))
    if tensor.type == GGMLQuantizationType.F16:
        return raw.view(np.float16).reshape(shape).astype(np.float32)
    return dequantize(raw.reshape(shape[:-1] + (-1,)), tensor.type).reshape(shape)


def load_transformer(path: str | Path, blocks: Sequence[int] | None = None) -> Transformer:
    """The model in `path`, dequantized to float32; with `blocks`, only those of its blocks,
    in that order (with its embeddings, final norm and head): a draft cut from it."""
    path = Path(path)
    contents = read_gguf(path)
    args = ModelArgs.from_gguf(contents, None if blocks is None else len(blocks))
    model = Transformer(args)
    sources = {name: source_name(gguf_name(name), blocks) for name in model.state_dict()}
    wanted = set(sources.values())
    weights = {
        tensor.name: torch.from_numpy(read_tensor(path, tensor))
        for tensor in contents.tensors
        if tensor.name in wanted
    }
    missing = wanted - weights.keys()
    if missing:
        raise ModelError(f"{path} lacks tensors {', '.join(sorted(missing)[:5])}: not a complete "
                         f"{args.architecture} model.")
    model.load_state_dict({name: weights[source] for name, source in sources.items()})
    return model.eval()


def source_name(tensor: str, blocks: Sequence[int] | None) -> str:
    """The file's tensor that fills `tensor` of a model made of `blocks`: blk.i is the
    file's blk.blocks[i]."""
    if blocks is None or not tensor.startswith("blk."):
        return tensor
    _, index, rest = tensor.split(".", 2)
    return f"blk.{blocks[int(index)]}.{rest}"

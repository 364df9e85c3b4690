"""A smol draft with padding entries past the target's vocabulary, which it prefers.

Drafts of some families carry a few padding rows more than their target (the
vocabulary check allows up to 128). Here each padding row is a copy of the embedding
of a token the draft itself would pick, scaled up: with the tied output head, the
padding id then wins the argmax wherever its twin would have, so an engine that lets
the draft propose ids the target lacks hands llama.cpp a token it refuses."""

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from completer.models.derive import rewrite_gguf
from completer.models.gguf_file import read_gguf

# Padding logits are this many times their twin's: larger wherever the twin's is positive.
SCALE = 3.0


def padded_draft(draft: Path, twins: list[int], destination: Path) -> Path:
    """`draft` with one padding entry per token of `twins`, appended after its vocabulary."""
    contents = read_gguf(draft, keep_arrays=True)
    embedding = next(tensor for tensor in contents.tensors if tensor.name == "token_embd.weight")
    raw = np.memmap(draft, dtype=np.uint8, mode="r")[embedding.offset : embedding.offset + embedding.n_bytes]
    n_embd, n_vocab = embedding.shape
    rows = dequantize(np.asarray(raw).reshape(n_vocab, -1), embedding.type)  # [n_vocab, n_embd]
    padded = np.concatenate([rows, SCALE * rows[twins]])  # [n_vocab + len(twins), n_embd]
    tokens = list(contents.get("tokenizer.ggml.tokens"))
    token_types = list(contents.get("tokenizer.ggml.token_type"))
    control = 3  # llama_token_type CONTROL: padding entries are control tokens
    values = {
        "tokenizer.ggml.tokens": tokens + [f"<pad_{i}>" for i in range(len(twins))],
        "tokenizer.ggml.token_type": token_types + [control] * len(twins),
    }
    replacements = {"token_embd.weight": (padded, GGMLQuantizationType(embedding.type))}
    return rewrite_gguf(draft, destination, values, replacements=replacements)

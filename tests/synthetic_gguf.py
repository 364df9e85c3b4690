"""A tiny random Qwen2 GGUF that llama.cpp loads: what the torch forward pass is
checked against for the parts SmolLM2 (llama) lacks: biases on q, k and v, NeoX
rotation, a non-default rope base and an untied output head.

Float32 weights, so llama.cpp's own rounding is small and the comparison can be
tight. The vocabulary is GPT-2's 256 byte tokens, a few merges and an end-of-text
control token: about the least llama.cpp's BPE loader accepts (without the merges
key it refuses the file: "cannot find tokenizer merges in model file").
"""

from pathlib import Path

import numpy as np
from gguf import GGUFWriter, TokenType

N_LAYER = 2
DIM = 64
N_HEAD = 4
N_KV_HEAD = 2  # grouped-query attention: two query heads per key/value head
HEAD_DIM = DIM // N_HEAD  # 16
FFN_DIM = 128
ROPE_BASE = 1_000_000.0  # Qwen2's, not llama.cpp's default 10000
NORM_EPS = 1e-6
CONTEXT_LENGTH = 256
MERGES = ["Ġ t", "h e", "i n", "Ġt he"]
END_OF_TEXT = "<|endoftext|>"


def byte_tokens() -> list[str]:
    """GPT-2's bytes_to_unicode: each byte as a printable character, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    characters, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            characters[byte] = chr(byte)
        else:
            characters[byte] = chr(256 + extra)
            extra += 1
    return [characters[byte] for byte in range(256)]


def vocabulary() -> tuple[list[str], list[int]]:
    tokens = byte_tokens() + ["".join(merge.split(" ")) for merge in MERGES] + [END_OF_TEXT]
    types = [TokenType.NORMAL] * (len(tokens) - 1) + [TokenType.CONTROL]
    return tokens, types


def write_qwen2_gguf(path: str | Path, seed: int = 0, tied_output: bool = False) -> Path:
    """Write the model to `path`; the same seed gives the same weights."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    tokens, types = vocabulary()
    n_vocab = len(tokens)

    def matrix(rows: int, columns: int) -> np.ndarray:  # numpy order: [out, in]
        # 1/sqrt(in): each layer's output about as large as its input, so every block matters
        return (rng.standard_normal((rows, columns)) / np.sqrt(columns)).astype(np.float32)

    def norm() -> np.ndarray:
        return (1 + rng.standard_normal(DIM) * 0.1).astype(np.float32)

    def bias(size: int) -> np.ndarray:
        return (rng.standard_normal(size) * 0.5).astype(np.float32)

    writer = GGUFWriter(path, "qwen2")
    writer.add_name("synthetic qwen2")
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(DIM)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(FFN_DIM)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_KV_HEAD)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_layer_norm_rms_eps(NORM_EPS)
    writer.add_file_type(0)  # all F32
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(n_vocab - 1)
    writer.add_eos_token_id(n_vocab - 1)
    writer.add_add_bos_token(False)

    writer.add_tensor("token_embd.weight", (rng.standard_normal((n_vocab, DIM)) * 0.3).astype(np.float32))
    for block in range(N_LAYER):
        name = f"blk.{block}."
        writer.add_tensor(name + "attn_norm.weight", norm())
        writer.add_tensor(name + "attn_q.weight", matrix(N_HEAD * HEAD_DIM, DIM))
        writer.add_tensor(name + "attn_q.bias", bias(N_HEAD * HEAD_DIM))
        writer.add_tensor(name + "attn_k.weight", matrix(N_KV_HEAD * HEAD_DIM, DIM))
        writer.add_tensor(name + "attn_k.bias", bias(N_KV_HEAD * HEAD_DIM))
        writer.add_tensor(name + "attn_v.weight", matrix(N_KV_HEAD * HEAD_DIM, DIM))
        writer.add_tensor(name + "attn_v.bias", bias(N_KV_HEAD * HEAD_DIM))
        writer.add_tensor(name + "attn_output.weight", matrix(DIM, N_HEAD * HEAD_DIM))
        writer.add_tensor(name + "ffn_norm.weight", norm())
        writer.add_tensor(name + "ffn_gate.weight", matrix(FFN_DIM, DIM))
        writer.add_tensor(name + "ffn_up.weight", matrix(FFN_DIM, DIM))
        writer.add_tensor(name + "ffn_down.weight", matrix(DIM, FFN_DIM))
    writer.add_tensor("output_norm.weight", norm())
    if not tied_output:
        writer.add_tensor("output.weight", matrix(n_vocab, DIM))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path

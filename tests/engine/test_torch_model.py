"""The torch forward pass (models/torch_model.py) against llama.cpp's logits on the same
files: the smol target and its derived draft (llama), and a tiny random Qwen2 file
(tests/synthetic_gguf.py) for q/k/v biases, NeoX rotation, GQA and a rope base."""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGUFWriter

import completer.models.derive
from completer.models.llama import LlamaContext, LlamaModel, requantize
from completer.models.errors import ModelError
from completer.models.gguf_file import read_gguf
from completer.models.torch_model import Transformer, load_transformer
from synthetic_gguf import write_qwen2_gguf

pytestmark = pytest.mark.slow  # torch

SOURCE = Path(completer.models.derive.__file__).read_text()  # real code to run both models on
N_TOKENS = 200


@dataclass(frozen=True)
class Tolerance:
    mean: float  # mean |torch - llama.cpp| over every logit
    max: float  # largest |torch - llama.cpp|
    top1: float  # least share of positions whose argmax agrees


# Measured on the first 200 tokens of models/derive.py (and by the lead on another
# file): Q4_0 mean 0.187 (0.157), max 2.62 (2.13), top-1 98% (98.5%); the 4-layer
# draft mean 0.080, max 0.90, top-1 98%. llama.cpp rounds activations to 8 bits for
# its Q4_0 dot products; torch multiplies the dequantized weights in float32. A real
# bug is far outside: the wrong rotary mode (NeoX for llama) gives mean 4.0, top-1 23.5%.
Q4_0 = Tolerance(mean=0.3, max=5.0, top1=0.95)
# The same weights requantized to F16 (the blocks then multiply in F16, without 8-bit
# activations; requantize keeps the embedding, and so the tied head, Q8_0): measured
# mean 0.058 (0.055), max 0.56 (0.46), top-1 98% (99%).
F16 = Tolerance(mean=0.1, max=1.0, top1=0.95)
# F32 weights: what is left is llama.cpp's float16 KV cache (rounding k and v to float16
# in torch halves the difference). Measured mean 1.1e-4 / max 9.3e-4 untied and mean
# 2.8e-4 / max 2.0e-3 tied (its logits are 2.5 times larger), at most 5.3e-4 / 5.0e-3
# over seeds 0-2. A rope base of 10000 instead of the file's moves them by mean 0.15,
# max 1.2; adjacent-pair rotation instead of NeoX by mean 0.21, max 1.7; zeroed q/k/v
# biases by mean 0.96, max 4.9 (all untied; more tied). Random weights make near ties,
# so one argmax in 200 can flip (measured 99.5% untied).
F32 = Tolerance(mean=2e-3, max=2e-2, top1=0.98)


@dataclass(frozen=True)
class Difference:
    mean: float
    max: float
    top1: float  # share of positions whose argmax agrees

    def within(self, tolerance: Tolerance) -> bool:
        return self.mean < tolerance.mean and self.max < tolerance.max and self.top1 >= tolerance.top1


def llama_logits(path: Path) -> tuple[list[int], np.ndarray]:
    """The first N_TOKENS tokens of SOURCE and llama.cpp's logits at each: [n, n_vocab]."""
    model = LlamaModel(path, n_gpu_layers=0)
    tokens = model.tokenize(SOURCE)[:N_TOKENS]
    # One thread: on a busy machine llama.cpp's threads wait at every op's barrier
    # (measured 10 s for 200 tokens with 2 threads on 2 shared cores, 1.4 s with 1).
    context = LlamaContext(model, n_ctx=512, n_threads=1)
    logits = context.eval(tokens, 0, logits_at=list(range(len(tokens))))
    context.close()
    model.close()
    return tokens, logits


def torch_logits(model: Transformer, tokens: list[int]) -> np.ndarray:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as llama_logits: 0.6 s for the smol target, 4-7 s with 2 threads on a busy machine
    try:
        with torch.no_grad():
            return model(torch.tensor([tokens]))[0].numpy()  # [n, n_vocab]
    finally:
        torch.set_num_threads(threads)


def difference(model: Transformer, reference: tuple[list[int], np.ndarray]) -> Difference:
    tokens, expected = reference
    actual = torch_logits(model, tokens)
    gap = np.abs(actual - expected)
    return Difference(float(gap.mean()), float(gap.max()), float((actual.argmax(-1) == expected.argmax(-1)).mean()))


def file_tensors(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> numpy shape (rows last), as gguf_tensors gives them."""
    return {tensor.name: tuple(reversed(tensor.shape)) for tensor in read_gguf(path).tensors}


def tensor_shapes(model: Transformer) -> dict[str, tuple[int, ...]]:
    return {name: tuple(value.shape) for name, value in model.gguf_tensors().items()}


# --- SmolLM2 (llama): the real target and its derived draft ---


@pytest.fixture(scope="module")
def smol_torch(smol) -> Transformer:
    return load_transformer(smol.target)


@pytest.fixture(scope="session")
def smol_f16(smol, smol_cache) -> Path:
    path = smol_cache / "smol-f16.gguf"
    if not path.exists():
        requantize(smol.target, path, "F16")
    return path


def test_the_smol_target_in_torch_gives_llama_cpps_logits(smol, smol_torch):
    assert smol_torch.args.architecture == "llama"
    assert smol_torch.args.n_layer == 30
    assert smol_torch.args.tied_output and not smol_torch.args.qkv_bias
    measured = difference(smol_torch, llama_logits(smol.target))
    assert measured.within(Q4_0), measured


def test_an_f16_copy_of_the_target_agrees_more_closely(smol_f16):
    measured = difference(load_transformer(smol_f16), llama_logits(smol_f16))
    assert measured.within(F16), measured


def test_the_first_layers_of_the_target_are_the_derived_draft(smol):
    draft = load_transformer(smol.target, blocks=range(4))
    assert draft.args.n_layer == len(draft.layers) == 4
    measured = difference(draft, llama_logits(smol.draft))
    assert measured.within(Q4_0), measured


def test_a_model_cut_from_chosen_blocks_holds_those_blocks_in_that_order(smol, smol_torch):
    cut = load_transformer(smol.target, blocks=[0, 1, 2, 29])
    whole = smol_torch.state_dict()
    for name, value in cut.state_dict().items():
        assert torch.equal(value, whole[name.replace("layers.3.", "layers.29.")]), name


def test_tensor_names_are_the_files(smol, smol_torch):
    assert tensor_shapes(smol_torch) == file_tensors(smol.target)
    # A cut model's tensors are those of the draft cut from the same file.
    assert tensor_shapes(load_transformer(smol.target, blocks=range(4))) == file_tensors(smol.draft)


# --- A synthetic Qwen2: biases, NeoX rotation, GQA, rope base, untied or tied head ---


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def qwen2(request, tmp_path_factory) -> Path:
    tied = request.param
    return write_qwen2_gguf(tmp_path_factory.mktemp("qwen2") / f"qwen2-{'tied' if tied else 'untied'}.gguf",
                            tied_output=tied)


@pytest.fixture(scope="module")
def qwen2_reference(qwen2) -> tuple[list[int], np.ndarray]:
    return llama_logits(qwen2)


def test_the_architecture_is_read_from_the_file(qwen2):
    args = load_transformer(qwen2).args
    assert (args.architecture, args.n_layer, args.dim, args.ffn_dim) == ("qwen2", 2, 64, 128)
    assert (args.n_head, args.n_kv_head, args.head_dim) == (4, 2, 16)  # grouped-query attention
    assert args.rope_base == 1_000_000.0
    assert args.norm_eps == pytest.approx(1e-6)
    assert args.qkv_bias
    assert args.tied_output == qwen2.name.endswith("-tied.gguf")
    assert args.vocab_size == 261


def test_a_qwen2_model_in_torch_gives_llama_cpps_logits(qwen2, qwen2_reference):
    assert len(qwen2_reference[0]) == N_TOKENS
    measured = difference(load_transformer(qwen2), qwen2_reference)
    assert measured.within(F32), measured


def test_the_qkv_biases_matter(qwen2, qwen2_reference):
    model = load_transformer(qwen2)
    with torch.no_grad():
        for block in model.layers:
            for linear in (block.attn_q, block.attn_k, block.attn_v):
                linear.bias.zero_()
    measured = difference(model, qwen2_reference)
    assert measured.mean > 10 * F32.mean and measured.max > 10 * F32.max, measured


def test_the_rope_base_matters(qwen2, qwen2_reference):
    model = load_transformer(qwen2)
    model.args = dataclasses.replace(model.args, rope_base=10000.0)  # rope tables come from the model's args
    measured = difference(model, qwen2_reference)
    assert measured.mean > 10 * F32.mean and measured.max > 10 * F32.max, measured


def test_qwen2_tensor_names_are_the_files(qwen2):
    assert tensor_shapes(load_transformer(qwen2)) == file_tensors(qwen2)
    first_block = {name: shape for name, shape in file_tensors(qwen2).items() if not name.startswith("blk.1.")}
    assert tensor_shapes(load_transformer(qwen2, blocks=[0])) == first_block


# --- Files it cannot read ---


def test_an_unsupported_architecture_is_a_clear_error(tmp_path):
    path = tmp_path / "mamba.gguf"
    writer = GGUFWriter(path, "mamba")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match=r"llama, qwen2 models, not 'mamba'"):
        load_transformer(path)

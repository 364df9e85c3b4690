"""The synthetic models of models/synthetic.py: random weights in the layouts of the hybrid
and recurrent families (Qwen3.5, Granite 4.0 H, Mamba-2) and of Qwen3 beside them. Each
loads through the backend as its architecture, and greedy decoding on it is a function of
the prompt: what the engine's tests on these families build on."""

import llama_cpp
import pytest

from completer.models.llama import LlamaContext, LlamaModel
from completer.models.synthetic import ARCHS, SHAPES, write_model

# llama.cpp's own classification: what the engine will branch on
# With the memory-kind tests that build on these models (test_memory_kinds.py): writing and
# loading the four takes 9 s here, and `make test-fast` keeps to 3 minutes.
pytestmark = pytest.mark.slow

KINDS = {"qwen35": "hybrid", "granitehybrid": "hybrid", "mamba2": "recurrent", "qwen3": "attention"}
CODE = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n" * 6


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, LlamaModel]:
    folder = tmp_path_factory.mktemp("synthetic")
    with pytest.MonkeyPatch.context() as patch:  # the vocabularies are taken into this cache, not the user's
        patch.setenv("COMPLETER_CACHE_DIR", str(folder / "cache"))
        loaded = {arch: LlamaModel(write_model(folder / f"{arch}.gguf", arch), n_gpu_layers=0) for arch in ARCHS}
    yield loaded
    for model in loaded.values():
        model.close()


def greedy(model: LlamaModel, prompt: list[int], n: int) -> list[int]:
    context = LlamaContext(model, n_ctx=256, n_threads=1, n_batch=128)  # one thread: no spinning on a busy machine
    try:
        out = [int(context.eval(prompt, 0, logits_at=(-1,), argmax=True)[0])]
        for _ in range(n - 1):
            out.append(int(context.eval(out[-1:], len(prompt) + len(out) - 1, logits_at=(0,), argmax=True)[0]))
        return out
    finally:
        context.close()


@pytest.mark.parametrize("arch", ARCHS)
def test_loads_as_its_architecture(models, arch):
    model, shape = models[arch], SHAPES[arch]["tiny"]
    assert (model.architecture, model.n_layers, model.n_embd) == (arch, shape.n_layer, shape.n_embd)
    kind = ("hybrid" if llama_cpp.llama_model_is_hybrid(model._model)
            else "recurrent" if llama_cpp.llama_model_is_recurrent(model._model) else "attention")
    assert kind == KINDS[arch]


@pytest.mark.parametrize("arch", ARCHS)
def test_real_vocabulary(models, arch):
    """Code tokenizes into the family's tokens and back, in fewer tokens than bytes."""
    model = models[arch]
    tokens = model.tokenize(CODE)
    assert model.detokenize(tokens) == CODE
    assert len(tokens) < len(CODE) / 2


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_decoding_is_deterministic(models, arch):
    model = models[arch]
    prompt = model.tokenize(CODE)[:100]
    first, second = greedy(model, prompt, 12), greedy(model, prompt, 12)
    assert first == second
    assert len(set(first)) > 3  # the weights are scaled to keep it moving, not stuck on one token


def test_same_seed_same_file(tmp_path):
    a = write_model(tmp_path / "a.gguf", "mamba2", seed=1)
    b = write_model(tmp_path / "b.gguf", "mamba2", seed=1)
    c = write_model(tmp_path / "c.gguf", "mamba2", seed=2)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()

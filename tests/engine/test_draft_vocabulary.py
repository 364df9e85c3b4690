"""A draft whose vocabulary has padding entries past the target's: the vocabulary check
lets it in, so the engine must never let it propose an id the target lacks."""

import pytest

from completer.engine.generation import Engine, GenerationRequest, generate
from completer.engine.speculative import Sampling
from completer.models.llama import LlamaContext, LlamaModel
from completer.models.gguf_file import MAX_VOCAB_SIZE_DIFFERENCE, check_same_vocabulary
from padded_draft import padded_draft

HOLE = "import os\n\n\ndef data_path(name):\n    base = os.path.dirname(__file__)\n    return os.path."


@pytest.fixture(scope="module")
def plain(target):
    """The prompt and the target's own greedy continuation of it."""
    prompt = target.tokenize(HOLE)
    return prompt, generate(Engine(target, None, n_ctx=1024, calibrate_s=0), GenerationRequest(prompt=prompt,
                                                                                               max_tokens=24,
                                                                                               mode="target")).tokens


@pytest.fixture(scope="module")
def padded(smol, target, draft, plain, tmp_path_factory):
    """The draft with a preferred padding twin of every token it picks along the plain text."""
    prompt, continuation = plain
    text = prompt + continuation
    logits = LlamaContext(draft, n_ctx=1024).eval(text, 0, logits_at=range(len(prompt) - 1, len(text)))
    twins = sorted(set(logits.argmax(axis=1).tolist()))
    path = padded_draft(smol.draft, twins, tmp_path_factory.mktemp("padded") / "padded-draft.gguf")
    return LlamaModel(path, n_gpu_layers=0)


@pytest.mark.slow  # over 2.5 s here: `make test-fast` keeps to 3 minutes
def test_the_padded_draft_is_admitted_and_prefers_its_padding(smol, target, plain, padded):
    """The premise: a draft the vocabulary check admits, which left alone proposes ids
    past the target's vocabulary."""
    check_same_vocabulary(smol.target, padded.path)
    assert target.n_vocab < padded.n_vocab <= target.n_vocab + MAX_VOCAB_SIZE_DIFFERENCE
    prompt, _ = plain
    logits = LlamaContext(padded, n_ctx=1024).eval(prompt, 0, logits_at=[-1])[0]
    assert logits.argmax() >= target.n_vocab


@pytest.mark.slow  # seconds of real model passes
@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, seed=5)])
def test_a_padded_draft_proposes_what_the_unpadded_one_does(target, draft, plain, padded, sampling):
    prompt, _ = plain
    unpadded = Engine(target, draft, n_ctx=1024, calibrate_s=0)
    expected = generate(unpadded, GenerationRequest(prompt=prompt, max_tokens=24, mode="draft", draft_length=4,
                                                    sampling=sampling))
    engine = Engine(target, padded, n_ctx=1024, calibrate_s=0)
    got = generate(engine, GenerationRequest(prompt=prompt, max_tokens=24, mode="draft", draft_length=4,
                                             sampling=sampling))
    assert got.stats.drafted > 0 and engine.drafter is not None  # the draft served throughout
    assert max(got.tokens) < target.n_vocab
    # The padding rows are the only difference, so with them masked the drafts, and the
    # text the target accepts from them, are the unpadded draft's.
    assert got.tokens == expected.tokens
    assert (got.stats.drafted, got.stats.accepted) == (expected.stats.drafted, expected.stats.accepted)

"""Model files: validation, derivation, vocabulary checks. Bad files give one clear error."""

import hashlib
import json
import shutil
import struct
import subprocess
import sys

import pytest
from gguf import GGUFValueType

from completer import loading
from completer.config import ModelOptions
from completer.models import llama, resolve
from completer.models.llama import LlamaModel, ran_out_of_memory
from completer.models.derive import derive_draft, rewrite_gguf
from completer.models.errors import ModelError
from completer.models.gguf_file import check_gguf, check_same_vocabulary, read_gguf


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_loading_a_pair_reads_each_files_header_once(smol, smol_cache, monkeypatch):
    """Resolving the files validates each header; the memory check and llama.cpp's load
    take that one, not a second read of the file."""
    monkeypatch.setenv("COMPLETER_CACHE_DIR", str(smol_cache))
    read = []
    for module in (resolve, loading, llama):
        def counted(path, real=module.check_gguf):
            read.append(path.name)
            return real(path)
        monkeypatch.setattr(module, "check_gguf", counted)
    pair = loading.load_pair(ModelOptions(preset="smol"))
    assert sorted(read) == sorted([smol.target.name, smol.draft.name])
    assert (pair.target.header.path, pair.draft.header.path) == (smol.target, smol.draft)


def test_the_derived_draft_is_deterministic(smol, tmp_path):
    again = derive_draft(smol.target, 4, tmp_path / "again.gguf")
    assert digest(again) == digest(smol.draft)
    header = check_gguf(again)
    assert header.layers == 4
    assert header.name.endswith("(first 4 layers)")
    assert not any(t.name.startswith("blk.4.") for t in read_gguf(again).tensors)


def test_a_draft_cannot_keep_every_layer(smol, tmp_path):
    with pytest.raises(ModelError, match="needs 1 to 29 layers"):
        derive_draft(smol.target, 30, tmp_path / "all.gguf")


def test_a_draft_with_another_vocabulary_is_refused_naming_both_files(smol, tmp_path):
    tokens = read_gguf(smol.draft, keep_arrays=True).get("tokenizer.ggml.tokens")
    renamed = tokens.copy()
    renamed[1000] = renamed[1000] + "_other"
    other = rewrite_gguf(smol.draft, tmp_path / "other-vocab.gguf", {"tokenizer.ggml.tokens": renamed})
    with pytest.raises(ModelError) as refused:
        check_same_vocabulary(smol.target, other)
    message = str(refused.value)
    assert str(smol.target) in message and str(other) in message
    assert "token 1000" in message


def test_a_draft_of_another_vocabulary_size_is_refused(smol, tmp_path):
    tokens = read_gguf(smol.draft, keep_arrays=True).get("tokenizer.ggml.tokens")
    contents = read_gguf(smol.draft, keep_arrays=True)
    shorter = {
        "tokenizer.ggml.tokens": tokens[:40000],
        "tokenizer.ggml.token_type": contents.get("tokenizer.ggml.token_type")[:40000],
    }
    other = rewrite_gguf(smol.draft, tmp_path / "short-vocab.gguf", shorter)
    with pytest.raises(ModelError, match="40000 tokens against the target's 49152"):
        check_same_vocabulary(smol.target, other)


def test_the_same_vocabulary_is_accepted(smol):
    check_same_vocabulary(smol.target, smol.draft)


def broken_files(source, folder):
    data = source.read_bytes()
    cases = {
        "truncated": data[: len(data) // 2],
        "header only": data[:4096],
        "bad magic": b"GGUX" + data[4:],
        "random": bytes(range(256)) * 64,
        "empty": b"",
        "text": b"this is not a model\n",
    }
    for name, content in cases.items():
        path = folder / f"{name.replace(' ', '-')}.gguf"
        path.write_bytes(content)
        yield name, path


def test_broken_files_give_one_clear_error_not_a_crash(smol, tmp_path):
    for name, path in broken_files(smol.draft, tmp_path):
        with pytest.raises(ModelError) as error:
            LlamaModel(path)
        assert str(path) in str(error.value), name
        assert "completer models pull" in str(error.value), name


def test_a_corrupt_tensor_table_is_caught_before_llama_cpp(smol, tmp_path):
    data = bytearray(smol.draft.read_bytes())
    offset = read_gguf(smol.draft).tensors[-1].offset
    table_entry = data.rfind(b"output_norm.weight", 0, offset)
    # Make the last tensor's type an unknown ggml type.
    type_at = table_entry + len(b"output_norm.weight") + 4 + 8
    data[type_at : type_at + 4] = (250).to_bytes(4, "little")
    path = tmp_path / "bad-type.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="unknown type 250"):
        check_gguf(path)


def test_a_missing_file_or_a_folder_gives_the_clear_error(tmp_path):
    with pytest.raises(ModelError, match="model file not found"):
        LlamaModel(tmp_path / "nowhere.gguf")
    with pytest.raises(ModelError, match="not a file"):
        LlamaModel(tmp_path)


def test_a_valid_copy_still_loads(smol, tmp_path):
    copy = tmp_path / "copy.gguf"
    shutil.copy(smol.draft, copy)
    assert LlamaModel(copy).n_layers == 4


def test_a_file_llama_cpp_refuses_is_tried_once_not_again_with_fewer_gpu_layers(smol, tmp_path, caplog):
    """Only running out of memory is mended by putting fewer layers on the GPU."""
    missing = rewrite_gguf(smol.draft, tmp_path / "no-output-norm.gguf",
                           keep_tensor=lambda tensor: tensor.name != "output_norm.weight")
    with pytest.raises(ModelError, match="output_norm"):
        LlamaModel(missing, n_gpu_layers=16)
    assert "trying fewer" not in caplog.text


def test_running_out_of_memory_is_told_apart_from_other_load_failures():
    assert ran_out_of_memory(["llama_model_load: error loading model: unable to allocate CUDA0 buffer"])
    assert ran_out_of_memory(["alloc_tensor_range: failed to allocate RPC0[127.0.0.1:50112] buffer of size 15"])
    assert ran_out_of_memory(["ggml_cuda_device_malloc: CUDA error: out of memory"])
    assert not ran_out_of_memory(["llama_model_load: error loading model: missing tensor 'output_norm.weight'"])


# A header crafted to cost memory: an array that claims far more entries than any model
# has. Each is read in a child process, its memory bounded so that the old cost (a
# Python object per entry) fails there rather than on the machine.
READ_HEADER = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
from completer.models.gguf_file import NotAModel, model_facts
before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
try:
    model_facts(sys.argv[1])
    refused = None
except NotAModel as problem:
    refused = problem.reason
seconds = time.perf_counter() - start
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(json.dumps({"refused": refused, "seconds": seconds, "grown": grown}))
"""


def crafted_header(path, sub_type: GGUFValueType, count: int, size: int):
    """A GGUF of one field, an array of `count` entries of `sub_type`, in a sparse file of
    `size` bytes (zeros after the header: empty strings, or zero numbers)."""
    key = b"tokenizer.ggml.tokens"
    with open(path, "wb") as file:
        file.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key)
        file.write(struct.pack("<IIQ", GGUFValueType.ARRAY, sub_type, count))
        file.truncate(size)
    return path


@pytest.mark.parametrize("sub_type, count, size", [
    (GGUFValueType.UINT8, 10**9, 2**30),  # it fits the file: refused as larger than any model's arrays
    (GGUFValueType.STRING, 10**9, 2**30),  # an empty string is 8 bytes: it cannot fit the file
    (GGUFValueType.STRING, 2**40, 64 * 2**20),
], ids=["u8 array", "strings", "2^40 strings"])
def test_a_header_claiming_a_huge_array_is_refused_at_once(tmp_path, sub_type, count, size):
    path = crafted_header(tmp_path / "crafted.gguf", sub_type, count, size)
    run = subprocess.run([sys.executable, "-c", READ_HEADER, str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["refused"] and "array" in result["refused"], result
    assert result["seconds"] < 2 and result["grown"] < 50 * 2**20, result

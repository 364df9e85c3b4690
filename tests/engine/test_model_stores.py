"""Finding the models other tools keep: each store is laid out on disk as its tool lays
it out (Ollama's manifests and sha256-named blobs, LM Studio's publisher/repo folders,
the hub cache's snapshot links into blobs, llama.cpp's flat cache, completer's cache),
from the real smol files, and read through the environment a user would have."""

import functools
import hashlib
import json
import os
import re
import shutil
import string
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType, GGUFWriter
from hypothesis import given
from hypothesis import strategies as st

from completer.loading import check_fits_memory
from completer.models.llama import LlamaModel
from completer.models.derive import rewrite_gguf
from completer.models.errors import ModelError
from completer.models.gguf_file import FIM_PREFIX, Field, GGUFContents, fim_token_id, kv_bytes_per_token, model_facts
from completer.models.gguf_file import check_gguf, read_gguf
from completer.models.stores import OLLAMA_PARTS, STORES, Scan, is_store_name, locate, ollama_name, ollama_parts
from completer.models.stores import scan, store_roots
from conftest import REPO
from synthetic_gguf import write_qwen2_gguf

OLLAMA_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


@functools.cache
def sha256(path: Path) -> str:
    """The file's digest, which names it in Ollama's and the hub's blob folders (no test
    changes a file it has taken the digest of)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def place(source: Path, destination: Path) -> Path:
    """The file at `destination`, a hard link to `source` where the file system allows;
    kept if it is there already (a blob two names share)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    if destination.exists():
        return destination
    try:
        os.link(source, destination)
    except OSError:
        shutil.copyfile(source, destination)
    return destination


@dataclass(frozen=True)
class Files:
    target: Path
    draft: Path
    other_vocabulary: Path  # the draft with one token renamed


@pytest.fixture(scope="module")
def files(smol, tmp_path_factory) -> Files:
    tokens = read_gguf(smol.draft, keep_arrays=True).get("tokenizer.ggml.tokens")
    renamed = [*tokens[:1000], tokens[1000] + "_other", *tokens[1001:]]
    other = tmp_path_factory.mktemp("other") / "other.gguf"
    return Files(smol.target, smol.draft, rewrite_gguf(smol.draft, other, {"tokenizer.ggml.tokens": renamed}))


# Each tool's layout, as it writes it.

def ollama_model(models: Path, manifest: str, file: Path, digest: str | None = None) -> Path:
    """Ollama's pull: the GGUF as blobs/sha256-<hex>, and a manifest naming it among the other
    layers. Returns the blob."""
    digest = digest or sha256(file)
    blob = place(file, models / "blobs" / f"sha256-{digest}")
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": blob.stat().st_size},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64, "size": 10},
    ]
    document = {"schemaVersion": 2, "mediaType": OLLAMA_MANIFEST, "layers": layers,
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "digest": "sha256:" + "2" * 64, "size": 20}}
    write(models / "manifests" / manifest, json.dumps(document))
    return blob


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def hub_file(hub: Path, repo_id: str, revision: str, relative: str, file: Path) -> Path:
    """huggingface_hub's download: the blob by its sha256, a snapshot link to it, refs/main."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    digest = sha256(file)
    place(file, repo / "blobs" / digest)
    link = repo / "snapshots" / revision / relative
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(repo / "blobs" / digest, link.parent))
    write(repo / "refs" / "main", revision)
    return link


@dataclass(frozen=True)
class Layout:
    environ: dict[str, str]
    home: Path
    expected: dict[str, Path]  # store name -> the real file


SMOL_REPO = "HuggingFaceTB/SmolLM2-135M-GGUF"


def lay_out(files: Files, environ: dict[str, str], home: Path) -> Layout:
    """Every store with models in it, where `environ` and `home` say they are."""
    roots = {}
    for store, root in store_roots(environ, home):
        roots.setdefault(store, []).append(root)
    (ollama,), (lmstudio, lmstudio_old), (hf, own_hub), (llama_cpp,), (cache,) = (roots[s] for s in STORES)
    expected = {
        "ollama:smollm2:135m": ollama_model(ollama, "registry.ollama.ai/library/smollm2/135m", files.target),
        "ollama:someone/smol-draft:latest":
            ollama_model(ollama, "registry.ollama.ai/someone/smol-draft/latest", files.draft),
        "ollama:example.com:5000/team/other:v1":
            ollama_model(ollama, "example.com:5000/team/other/v1", files.other_vocabulary),
        f"lmstudio:{SMOL_REPO}/SmolLM2-135M.Q4_0.gguf":
            place(files.target, lmstudio / SMOL_REPO / "SmolLM2-135M.Q4_0.gguf"),
        "lmstudio:bartowski/smol-draft-GGUF/smol-draft.gguf":
            place(files.draft, lmstudio_old / "bartowski" / "smol-draft-GGUF" / "smol-draft.gguf"),
        "hf:completer/smol-draft/drafts/first4.gguf":
            hub_file(own_hub, "completer/smol-draft", "c" * 40, "drafts/first4.gguf", files.draft),
        "llama.cpp:HuggingFaceTB_SmolLM2-135M-GGUF_smol.gguf":
            place(files.target, llama_cpp / "HuggingFaceTB_SmolLM2-135M-GGUF_smol.gguf"),
        "cache:derived/smol.first4.gguf": place(files.draft, cache / "derived" / "smol.first4.gguf"),
    }
    # Two revisions hold smol.gguf: the newer one's file is the one used.
    older = hub_file(hf, SMOL_REPO, "a" * 40, "smol.gguf", files.draft)
    expected[f"hf:{SMOL_REPO}/smol.gguf"] = hub_file(hf, SMOL_REPO, "b" * 40, "smol.gguf", files.target)
    os.utime(older, (1_000_000_000, 1_000_000_000), follow_symlinks=False)
    # What is beside the models and not one: llama.cpp's etag, a llama.cpp build's files.
    write(llama_cpp / "HuggingFaceTB_SmolLM2-135M-GGUF_smol.gguf.etag", '"abc"')
    place(files.draft, cache / "llama.cpp" / "0.3.36-abcdef" / "vendor" / "ggml-vocab.gguf")
    return Layout(environ, home, {name: path.resolve() for name, path in expected.items()})


@pytest.fixture
def layout(files, tmp_path) -> Layout:
    """The stores at their default places in a home folder, with no variables set."""
    return lay_out(files, {}, tmp_path / "home")


def by_name(found):
    return {model.name: model for model in found}


# The stores.

def test_every_store_s_models_are_found_by_their_names(layout):
    result = scan(layout.environ, layout.home)
    assert result.skipped == []
    assert {m.name: m.path for m in result.found} == layout.expected
    assert [m.store for m in result.found] == sorted((m.store for m in result.found), key=STORES.index)
    assert all(m.name.startswith(m.store + ":") for m in result.found)


def test_the_variables_each_tool_reads_move_its_store(files, tmp_path):
    environ = {"OLLAMA_MODELS": str(tmp_path / "ollama"), "HF_HOME": str(tmp_path / "hf-home"),
               "LLAMA_CACHE": str(tmp_path / "llama"), "COMPLETER_CACHE_DIR": str(tmp_path / "completer")}
    layout = lay_out(files, environ, tmp_path / "home")
    # With $LLAMA_CACHE set, this llama.cpp's -hf downloads go to a hub layout inside it.
    link = hub_file(tmp_path / "llama", "ggml-org/smol", "d" * 40, "smol.gguf", files.target)
    found = {m.name: m.path for m in scan(environ, layout.home).found}
    assert found == {**layout.expected, "llama.cpp:ggml-org/smol/smol.gguf": link.resolve()}
    assert found["ollama:smollm2:135m"].is_relative_to(tmp_path / "ollama")
    assert not (layout.home / ".ollama").exists()


def test_a_file_is_found_once_and_a_name_names_one_file(layout, files):
    ollama_model(layout.home / ".ollama" / "models", "registry.ollama.ai/library/smollm2/latest", files.target)
    own_hub = layout.home / ".cache" / "completer" / "hub"
    again = hub_file(own_hub, SMOL_REPO, "e" * 40, "smol.gguf", files.draft)
    result = scan(layout.environ, layout.home)
    # Two tags of one blob: listed once, by the first name; both names locate it.
    target = layout.expected["ollama:smollm2:135m"]
    assert [m.name for m in result.found if m.path == target] == ["ollama:smollm2:135m"]
    assert locate("ollama:smollm2", layout.environ, layout.home) == target
    # The same hub name in the user's cache and completer's: the user's is used, the other is a line.
    name = f"hf:{SMOL_REPO}/smol.gguf"
    assert by_name(result.found)[name].path == layout.expected[name]
    assert result.skipped == [f"{name} ({again.resolve()}): the same name as {layout.expected[name]}, which is used"]


def test_store_roots_follow_each_tool_s_precedence(tmp_path):
    home = tmp_path / "home"
    roots = store_roots({"HF_HUB_CACHE": "/hub", "HF_HOME": "/hf-home", "XDG_CACHE_HOME": "/xdg"}, home, "linux")
    assert ("hf", Path("/hub")) in roots and ("llama.cpp", Path("/xdg/llama.cpp")) in roots
    assert ("cache", Path("/xdg/completer")) in roots and ("hf", Path("/xdg/completer/hub")) in roots
    assert ("hf", Path("/xdg/huggingface/hub")) in store_roots({"XDG_CACHE_HOME": "/xdg"}, home)
    assert ("llama.cpp", home / "Library" / "Caches" / "llama.cpp") in store_roots({}, home, "darwin")
    assert [store for store, _ in roots] == sorted((store for store, _ in roots), key=STORES.index)


def test_facts_are_read_from_the_files(layout, files):
    found = by_name(scan(layout.environ, layout.home).found)
    target = found["ollama:smollm2:135m"].facts
    draft = found["ollama:someone/smol-draft:latest"].facts
    other = found["ollama:example.com:5000/team/other:v1"].facts
    assert (target.architecture, target.has_fim, target.is_chat) == ("llama", False, True)
    assert (target.quantization, target.tokenizer_model, target.n_tokens) == ("Q4_0", "gpt2", 49152)
    assert target.context_length == 8192 and target.size_bytes == files.target.stat().st_size
    # SmolLM2-135M: 30 layers of 3 KV heads of 64 values each for K and V, 2 bytes a value.
    assert target.kv_bytes_per_token == 30 * 3 * (64 + 64) * 2
    assert 130e6 < target.parameters < 140e6 and draft.parameters < target.parameters / 2
    assert target.vocabulary_id == draft.vocabulary_id != other.vocabulary_id
    assert len(target.vocabulary_id) == 12 and int(target.vocabulary_id, 16) >= 0


def test_facts_of_another_family(gemma, smol):
    facts = model_facts(gemma)
    assert (facts.architecture, facts.is_chat, facts.has_fim, facts.sliding_window) == ("gemma3", False, False, 512)
    # Gemma 3 270M states its key and value lengths (256), not the embedding split among its heads (160).
    assert facts.kv_bytes_per_token == 18 * 1 * (256 + 256) * 2
    assert facts.n_tokens == 262144 and facts.vocabulary_id != model_facts(smol.target).vocabulary_id


def test_fim_is_decided_as_llama_cpp_decides_it(smol, smol_fim):
    for path in (smol.target, smol_fim):
        loaded = LlamaModel(path, vocab_only=True)
        try:
            assert model_facts(path).has_fim == loaded.special.has_fim
        finally:
            loaded.close()
    assert model_facts(smol_fim).has_fim and not model_facts(smol.target).has_fim


def contents(fields: dict) -> GGUFContents:
    return GGUFContents(Path("made.gguf"), 3, {k: Field(v, GGUFValueType.UINT32) for k, v in fields.items()}, [])


def test_a_fim_token_id_key_wins_over_spellings_unless_it_names_no_token():
    tokens = ["a", "<fim_prefix>", "b", "c"]
    keys, spellings = FIM_PREFIX
    assert fim_token_id(contents({"tokenizer.ggml.tokens": tokens}), keys, spellings) == 1
    assert fim_token_id(contents({"tokenizer.ggml.tokens": tokens, keys[0]: 3}), keys, spellings) == 3
    assert fim_token_id(contents({"tokenizer.ggml.tokens": tokens, keys[0]: 3, keys[1]: 2}), keys, spellings) == 2
    assert fim_token_id(contents({"tokenizer.ggml.tokens": tokens, keys[0]: 99}), keys, spellings) == 1
    assert fim_token_id(contents({"tokenizer.ggml.tokens": ["a"]}), keys, spellings) is None


def test_kv_bytes_per_token_sums_per_layer_kv_heads():
    common = {"x.block_count": 3, "x.attention.head_count": 8, "x.embedding_length": 512}
    assert kv_bytes_per_token(contents(common), "x") == 3 * 8 * (64 + 64) * 2
    per_layer = {**common, "x.attention.head_count_kv": [2, 0, 4], "x.attention.value_length": 32}
    assert kv_bytes_per_token(contents(per_layer), "x") == (2 + 0 + 4) * (64 + 32) * 2
    assert kv_bytes_per_token(contents({"x.block_count": 3}), "x") == 0  # no attention: a recurrent model


# Names.

def test_locate_finds_each_name_s_file(layout):
    for name, path in layout.expected.items():
        assert locate(name, layout.environ, layout.home) == path


def test_ollama_names_may_leave_out_the_defaults_and_case(layout):
    target = layout.expected["ollama:smollm2:135m"]
    for name in ("ollama:registry.ollama.ai/library/smollm2:135m", "ollama:library/smollm2:135m",
                 "ollama:SmolLM2:135M"):
        assert locate(name, layout.environ, layout.home) == target
    draft = layout.expected["ollama:someone/smol-draft:latest"]
    assert locate("ollama:someone/smol-draft", layout.environ, layout.home) == draft


def test_an_unknown_name_is_one_line_with_the_closest_names(layout):
    with pytest.raises(ModelError) as unknown:
        locate("ollama:smollm2:136m", layout.environ, layout.home)
    message = str(unknown.value)
    assert "\n" not in message and "ollama:smollm2:135m" in message and "`completer models list`" in message
    with pytest.raises(ModelError, match="no models were found"):
        locate("ollama:smollm2", {}, layout.home / "nobody")


def test_store_names_are_told_from_paths():
    assert all(is_store_name(f"{store}:x") for store in STORES)
    assert is_store_name("llama.cpp:HuggingFaceTB_SmolLM2-135M-GGUF_smol.gguf")
    for path in ("models/smol.gguf", "/home/me/ollama.gguf", "C:\\models\\x.gguf", "ollamas:x", "hf/a/b.gguf"):
        assert not is_store_name(path)


# Ollama's name parts: first character a letter, digit or _, then also - and . (not in a
# namespace), and : in a host (its port), as isValidPart in types/model/name.go.
FIRST = string.ascii_letters + string.digits + "_"
part = st.builds(str.__add__, st.sampled_from(FIRST), st.text(FIRST + "-.", max_size=12))
namespace = st.builds(str.__add__, st.sampled_from(FIRST), st.text(FIRST + "-", max_size=12))
host = st.one_of(st.just("registry.ollama.ai"), part, st.builds("{}:{}".format, part, st.integers(1, 65535)))


@given(host, st.one_of(st.just("library"), namespace), part, part)
def test_an_ollama_name_and_its_manifest_path_map_both_ways(host, namespace, model, tag):
    assert all(map(re.fullmatch, OLLAMA_PARTS, (host, namespace, model, tag)))
    name = ollama_name(host, namespace, model, tag)
    parsed = ollama_parts(name)
    assert [p.casefold() for p in parsed] == [p.casefold() for p in (host, namespace, model, tag)]
    assert ollama_name(*parsed) == name
    if host == "registry.ollama.ai" and namespace == "library":
        assert name == f"{model}:{tag}" and ollama_parts(model) == (host, namespace, model, "latest")


# What cannot be used: one line each, naming the file.

def clip_projector(path: Path) -> Path:
    """A vision projector as llama.cpp's mmproj files are: a GGUF of architecture clip."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(path, "clip")
    writer.add_tensor("v.patch_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.slow  # over 2.5 s here: `make test-fast` keeps to 3 minutes
def test_each_unusable_file_is_one_line_naming_it(layout, files, tmp_path):
    ollama, lmstudio = layout.home / ".ollama" / "models", layout.home / ".lmstudio" / "models"
    llama_cpp, hf = layout.home / ".cache" / "llama.cpp", layout.home / ".cache" / "huggingface" / "hub"
    full = files.target.read_bytes()
    # A pull cut short: the blob named by the digest of the whole file, half of it there.
    whole = rewrite_gguf(files.draft, tmp_path / "whole.gguf", {"general.name": "cut short"})
    blob = ollama_model(ollama, "registry.ollama.ai/library/cut/latest", whole)
    blob.unlink()
    write(blob, whole.read_bytes()[: whole.stat().st_size // 2])
    ollama_model(ollama, "registry.ollama.ai/library/gone/latest", files.target, "f" * 64).unlink()
    truncated_blob, missing_blob = (ollama / "manifests" / "registry.ollama.ai" / "library" / model / "latest"
                                    for model in ("cut", "gone"))
    not_json = write(ollama / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest", "{not json")
    write(ollama / "manifests" / "registry.ollama.ai" / "library" / "smollm2" / ".DS_Store", b"\0")  # not a name
    mlx = lmstudio / "mlx-community" / "SmolLM2-135M-4bit"
    write(mlx / "model.safetensors", b"\0" * 64)
    write(mlx / "config.json", "{}")
    projector = clip_projector(lmstudio / SMOL_REPO / "mmproj-f16.gguf")
    random_bytes = write(llama_cpp / "random.gguf", np.random.default_rng(0).bytes(4096))
    cut = write(llama_cpp / "cut.gguf", full[: len(full) // 2])
    vocabulary = rewrite_gguf(files.draft, tmp_path / "vocab.gguf", keep_tensor=lambda tensor: False)
    vocabulary_only = hub_file(hf, "ggml-org/vocab", "a" * 40, "ggml-vocab-smol.gguf", vocabulary)
    outside = place(files.target, tmp_path / "elsewhere" / "smol.gguf")
    (lmstudio / "me").mkdir()
    link_out = lmstudio / "me" / "linked"
    link_out.symlink_to(outside.parent, target_is_directory=True)

    result = scan(layout.environ, layout.home)
    reasons = {
        truncated_blob: f"truncated: blob {blob.name} has",
        missing_blob: f"manifest names blob sha256-{'f' * 64}, which is missing",
        not_json: "manifest is not JSON",
        mlx: "no .gguf file",
        projector: "a vision projector (clip), not a language model",
        random_bytes: "not a GGUF file",
        cut: "truncated (tensor",
        vocabulary_only: "vocabulary only, no weights",
        link_out: "a link out of the store",
    }
    for path, reason in reasons.items():
        lines = [line for line in result.skipped if str(path) in line or str(path.resolve()) in line]
        assert len(lines) == 1 and reason in lines[0], (path, lines)
    assert len(result.skipped) == len(reasons)
    assert {m.name: m.path for m in result.found} == layout.expected  # the good ones are still found


def test_a_snapshot_link_into_another_repository_is_not_followed(layout, files):
    hf = layout.home / ".cache" / "huggingface" / "hub"
    theirs = hf / ("models--" + SMOL_REPO.replace("/", "--")) / "blobs" / sha256(files.target)
    link = hf / "models--me--borrowed" / "snapshots" / ("e" * 40) / "smol.gguf"
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(theirs, link.parent))
    assert [line for line in scan(layout.environ, layout.home).skipped if "a link out of the store" in line] == [
        f"{link}: a link out of the store (to {theirs}), not followed"]
    with pytest.raises(ModelError, match="no model named hf:me/borrowed/smol.gguf"):
        locate("hf:me/borrowed/smol.gguf", layout.environ, layout.home)


def test_locating_an_unusable_file_says_why(layout, files):
    clip_projector(layout.home / ".lmstudio" / "models" / "a" / "b" / "mmproj.gguf")
    with pytest.raises(ModelError, match="lmstudio:a/b/mmproj.gguf is .*: a vision projector"):
        locate("lmstudio:a/b/mmproj.gguf", layout.environ, layout.home)


# Read only.

def listing(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every path below a folder, links not followed: size, modification time, what it is."""
    seen = {}
    for parent, folders, names in os.walk(folder):
        for name in folders + names:
            path = Path(parent) / name
            stat = path.lstat()
            kind = os.readlink(path) if path.is_symlink() else ("dir" if path.is_dir() else "file")
            seen[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns, kind)
    return seen


def test_scanning_and_locating_write_nothing(layout, tmp_path):
    clip_projector(layout.home / ".lmstudio" / "models" / "a" / "b" / "mmproj.gguf")  # a skipped file too
    before = listing(tmp_path)
    scan(layout.environ, layout.home)
    for name in layout.expected:
        locate(name, layout.environ, layout.home)
    with pytest.raises(ModelError):
        locate("hf:nobody/nothing/x.gguf", layout.environ, layout.home)
    assert listing(tmp_path) == before


def test_missing_stores_are_nothing_and_are_not_made(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert scan({}, home) == Scan([], [])
    assert list(home.iterdir()) == []


# What a careless or hostile store holds: each is one line, and the other models are still found.

def test_a_link_loop_is_one_line_and_the_other_models_are_found(layout, files):
    repo = layout.home / ".lmstudio" / "models" / "me" / "circle"
    good = place(files.draft, repo / "good.gguf")
    (repo / "loop1.gguf").symlink_to("loop2.gguf")
    (repo / "loop2.gguf").symlink_to("loop1.gguf")
    result = scan(layout.environ, layout.home)
    first, second = repo / "loop1.gguf", repo / "loop2.gguf"
    assert result.skipped == [f"{first} -> {second} -> {first}: links in a loop, not followed"]
    assert {m.name: m.path for m in result.found} == {**layout.expected, "lmstudio:me/circle/good.gguf": good}
    assert locate("lmstudio:me/circle/good.gguf", layout.environ, layout.home) == good


def test_a_tree_too_deep_is_one_line_and_the_other_models_are_found(layout):
    deep = layout.home / ".cache" / "completer" / "deep"
    folder = deep
    for _ in range(1000):  # os.makedirs recurses as deep as the tree
        folder = folder / "d"
        folder.mkdir(parents=folder.parent == deep)
    try:
        result = scan(layout.environ, layout.home)
        assert len(result.skipped) == 1 and "folders deep below the store, not read" in result.skipped[0]
        assert result.skipped[0].startswith(str(deep))
        assert {m.name: m.path for m in result.found} == layout.expected
    finally:
        subprocess.run(["rm", "-rf", str(deep)], check=True)  # shutil.rmtree recurses as deep as the tree


# As a user whose files these are, not as root (root enters any folder and reads any file).
SCAN_AS_USER = """
import json, sys
from pathlib import Path
from completer.models.errors import ModelError
from completer.models.stores import locate, scan
home = Path(sys.argv[1])
result = scan({}, home)
try:
    located = str(locate(sys.argv[2], {}, home))
except ModelError as error:
    located = str(error)
print(json.dumps({"found": [m.name for m in result.found], "skipped": result.skipped, "located": located}))
"""


def unprivileged() -> list[str]:
    """The command prefix that runs a program as a user without root's right to read anything."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: permissions would not be checked")
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@pytest.fixture
def shared_home():
    """A home folder that another user can read (pytest's own tmp_path is root's alone)."""
    home = Path(tempfile.mkdtemp(prefix="completer-stores-"))
    home.chmod(0o755)
    yield home
    subprocess.run(["chmod", "-R", "u+rwx", str(home)], check=True)
    shutil.rmtree(home)


def qwen_at(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_qwen2_gguf(path)


def test_a_folder_or_file_that_cannot_be_read_is_one_line(shared_home):
    lmstudio = shared_home / ".lmstudio" / "models"
    good, locked, shut = (qwen_at(lmstudio / "me" / repo / "qwen.gguf") for repo in ("good", "locked", "shut"))
    derived = qwen_at(shared_home / ".cache" / "completer" / "derived" / "x.gguf")
    subprocess.run(["chmod", "-R", "a+rX", str(shared_home)], check=True)
    locked.parent.chmod(0o644)  # listed, not entered: what `chmod -R 644` leaves
    derived.parent.chmod(0o600)  # neither listed nor entered
    shut.chmod(0o000)
    run = subprocess.run([*unprivileged(), sys.executable, "-c", SCAN_AS_USER, str(shared_home),
                          "lmstudio:me/shut/qwen.gguf"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["found"] == ["lmstudio:me/good/qwen.gguf"]
    assert sorted(result["skipped"]) == [
        f"{derived.parent}: cannot be entered (Permission denied)",
        f"{locked.parent}: cannot be entered (Permission denied)",
        f"lmstudio:me/shut/qwen.gguf ({shut}): cannot be read (Permission denied)"]
    assert "\n" not in result["located"] and f"{shut}" in result["located"]
    assert "cannot be read (Permission denied)" in result["located"]


# A split model (gguf-split, or the gguf package's writer): the metadata in the first
# shard only, the tensors spread over all, each shard <name>-0000k-of-0000n.gguf.

def split_copy(source: Path, destination: Path, max_tensors: int) -> list[Path]:
    """A float32 model rewritten as shards of at most `max_tensors` tensors each."""
    contents = read_gguf(source, keep_arrays=True)
    destination.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(destination, contents.get("general.architecture"), split_max_tensors=max_tensors)
    for key, field in contents.fields.items():
        if key != "general.architecture":
            writer.add_key_value(key, field.value, field.type, field.sub_type)
    data = np.memmap(source, dtype=np.float32, mode="r")
    for tensor in contents.tensors:
        start = tensor.offset // 4
        writer.add_tensor(tensor.name, data[start : start + tensor.n_bytes // 4].reshape(tuple(reversed(tensor.shape))))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(destination.parent.glob(destination.stem + "-*-of-*.gguf"))


def test_a_split_model_is_one_model_of_its_whole_size(layout, tmp_path):
    whole = write_qwen2_gguf(tmp_path / "qwen.gguf")
    shards = split_copy(whole, tmp_path / "split" / "qwen.gguf", max_tensors=10)
    assert [s.name for s in shards] == [f"qwen-0000{k}-of-00003.gguf" for k in (1, 2, 3)]
    repo = layout.home / ".lmstudio" / "models" / "me" / "qwen-split"
    for shard in shards:
        place(shard, repo / shard.name)
    for shard in shards:  # and the same shards in the hub cache: snapshot links to sha256-named blobs
        hub_file(layout.home / ".cache" / "huggingface" / "hub", "me/qwen-split", "f" * 40, shard.name, shard)
    result = scan(layout.environ, layout.home)
    assert result.skipped == []
    split = {m.name: m for m in result.found if "qwen" in m.name}
    lmstudio_name, hub_name = "lmstudio:me/qwen-split/qwen-00001-of-00003.gguf", "hf:me/qwen-split/qwen-00001-of-00003.gguf"
    assert sorted(split) == [hub_name, lmstudio_name]
    facts = model_facts(whole)
    for model in split.values():
        assert model.facts.size_bytes == sum(s.stat().st_size for s in shards)
        assert (model.facts.parameters, model.facts.vocabulary_id) == (facts.parameters, facts.vocabulary_id)
    # llama.cpp finds the other shards by the first one's name: the path keeps it.
    path = locate(hub_name, layout.environ, layout.home)
    assert path.name == shards[0].name
    model = LlamaModel(path, n_gpu_layers=0)
    try:
        assert model.n_layers == 2
    finally:
        model.close()


def test_a_split_model_missing_a_shard_is_one_line(layout, tmp_path):
    shards = split_copy(write_qwen2_gguf(tmp_path / "qwen.gguf"), tmp_path / "split" / "qwen.gguf", max_tensors=10)
    repo = layout.home / ".lmstudio" / "models" / "me" / "qwen-split"
    for shard in shards[:2]:
        place(shard, repo / shard.name)
    result = scan(layout.environ, layout.home)
    assert len(result.skipped) == 1
    assert result.skipped[0].startswith(f"lmstudio:me/qwen-split/qwen-00001-of-00003.gguf ({repo / shards[0].name}): ")
    assert "shard 3 of 3" in result.skipped[0] and "not found" in result.skipped[0]
    # A later shard alone is named as one: llama.cpp loads a split model from its first shard.
    (repo / shards[0].name).unlink()
    assert scan(layout.environ, layout.home).skipped == [
        f"lmstudio:me/qwen-split/qwen-00002-of-00003.gguf ({repo / shards[1].name}): "
        f"shard 2 of 3 of a split model: llama.cpp loads it through the first, {shards[0].name}"]


def test_the_memory_check_weighs_every_shard_of_a_split_model(tmp_path):
    """The first shard is small; the last has a sparse tail past this machine's memory
    (still a valid shard: its tensors lie inside). The model as a whole cannot fit."""
    shards = split_copy(write_qwen2_gguf(tmp_path / "qwen.gguf"), tmp_path / "split" / "qwen.gguf", max_tensors=10)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    os.truncate(shards[-1], 2 * memory)
    assert shards[0].stat().st_size < memory
    with pytest.raises(ModelError, match=f"^{re.escape(str(shards[0]))} is [0-9.]+ GiB, more than this machine's memory"):
        check_fits_memory(check_gguf(shards[0]), [])

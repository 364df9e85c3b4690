"""Reading GGUF files: validation, metadata, vocabularies, tensor locations.

llama.cpp can abort the whole process on some malformed files, so every file is
read here first, with a bounds check on every read: a missing, truncated or
corrupt file becomes one clear ModelError. This parser is small and fast:
gguf.GGUFReader builds an array per vocabulary entry, which makes reading a header
take seconds (docs/models-timing.md); the `gguf` package supplies the constants and,
in models/derive.py, the writer.
"""

import hashlib
import json
import mmap
import re
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from completer.models.errors import ModelError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# llama.cpp's own speculative example accepts drafts whose vocabulary is at most
# this many entries longer or shorter (padding rows), if the shared ids agree.
MAX_VOCAB_SIZE_DIFFERENCE = 128

# What a header may cost before it is refused: any file from a catalogue can claim
# arrays of billions of entries, and listing a store reads every header. The largest
# vocabularies (Gemma's 262,144 tokens) with their scores, types and merges hold about
# a million entries, and a few MiB of text.
MAX_ARRAY_ENTRIES = 2**21  # strings walked, and entries kept, in all of a header's arrays together
MAX_KEPT_BYTES = 2**26  # of the file, kept as strings and numbers
MAX_FIELDS = 2**16  # models have about fifty
MAX_TENSORS = 2**16  # the largest models have a few thousand
MIN_FIELD_BYTES = 8 + 4 + 1  # a key's length, a type, the smallest value
MIN_TENSOR_BYTES = 8 + 4 + 4 + 8  # a name's length, its dimensions, type and offset

# gguf-split (tools/gguf-split, llama_split_path in src/llama.cpp) writes a model as
# <prefix>-00001-of-0000n.gguf and on: the metadata in the first shard only, each shard
# with its number (split.no, from 0) and the count; llama.cpp loads the first.
SPLIT_NO = "split.no"
SPLIT_COUNT = "split.count"
SHARD_NAME = re.compile(r"(?P<prefix>.+)-(?P<number>\d{5})-of-(?P<count>\d{5})\.gguf")

_SCALARS = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}


class NotAModel(ModelError):
    """A file that is not a usable model. `reason` says why in a few words, for lists
    of many files (models/stores.py) where the whole message would repeat itself."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class _Malformed(Exception):
    def __init__(self, problem: str, reason: str | None = None):
        super().__init__(problem)
        self.reason = reason or problem


@dataclass(frozen=True)
class Field:
    """One metadata entry: its value and GGUF types (sub_type for arrays)."""

    value: Any
    type: GGUFValueType
    sub_type: GGUFValueType | None = None


@dataclass(frozen=True)
class TensorLocation:
    name: str
    shape: tuple[int, ...]  # GGUF order: ne0 (the row length) first
    type: GGMLQuantizationType
    offset: int  # absolute, in bytes
    n_bytes: int


@dataclass(frozen=True)
class GGUFContents:
    path: Path
    version: int
    fields: dict[str, Field]
    tensors: list[TensorLocation]

    def get(self, key: str, default: Any = None) -> Any:
        field = self.fields.get(key)
        return field.value if field is not None else default


class _Cursor:
    """Reads little-endian GGUF values from a buffer, refusing to read past its end, and
    to keep more than a header's share (MAX_ARRAY_ENTRIES, MAX_KEPT_BYTES)."""

    def __init__(self, buffer: memoryview):
        self.buffer = buffer
        self.offset = 0
        self.entries_left = MAX_ARRAY_ENTRIES
        self.kept_bytes_left = MAX_KEPT_BYTES

    def take(self, n: int) -> memoryview:
        if n < 0 or self.offset + n > len(self.buffer):
            problem = f"needs {n} bytes at offset {self.offset}, past the end of the file"
            raise _Malformed(problem, f"truncated or corrupt: {problem}")
        view = self.buffer[self.offset : self.offset + n]
        self.offset += n
        return view

    def keep(self, n_bytes: int) -> memoryview:
        self.spend(n_bytes)
        return self.take(n_bytes)

    def spend(self, n_bytes: int) -> None:
        self.kept_bytes_left -= n_bytes
        if self.kept_bytes_left < 0:
            raise _Malformed(f"its header holds more than {MAX_KEPT_BYTES:,} bytes of metadata, which no model has",
                             "corrupt: more metadata than any model's")

    def count(self, what: str, n: int, min_bytes: int, most: int) -> int:
        """`n`, read as the number of something of at least `min_bytes` each, refused
        when it is more than `most` or than the rest of the file holds."""
        left = len(self.buffer) - self.offset
        if n > most or n * min_bytes > left:
            problem = f"{what} of {n:,} entries, more than {'the file holds' if n <= most else 'any model has'}"
            raise _Malformed(f"it claims {problem}", f"corrupt: {problem}")
        return n

    def scalar(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.keep(self.scalar("<Q"))
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as error:
            raise _Malformed(f"a string is not UTF-8 ({error})") from None

    def strings(self, n: int, keep: bool) -> list[str] | None:
        """`n` strings, decoded when `keep`. Their lengths are walked first, so that what
        they hold is checked against the file's end and MAX_KEPT_BYTES before any is built."""
        unpack, start, offset = struct.Struct("<Q").unpack_from, self.offset, self.offset
        for _ in range(n):
            if offset > len(self.buffer) - 8:
                self.offset = offset
                self.take(8)  # refused: past the end
            offset += 8 + unpack(self.buffer, offset)[0]
        self.take(offset - start)  # refused if the last string ends past the end
        if not keep:
            return None
        self.spend(offset - start - 8 * n)
        items, offset = [], start
        try:
            for _ in range(n):
                size = unpack(self.buffer, offset)[0]
                items.append(str(self.buffer[offset + 8 : offset + 8 + size], "utf-8"))
                offset += 8 + size
        except UnicodeDecodeError as error:
            raise _Malformed(f"a string is not UTF-8 ({error})") from None
        return items

    def value_type(self) -> GGUFValueType:
        raw = self.scalar("<I")
        try:
            return GGUFValueType(raw)
        except ValueError:
            raise _Malformed(f"unknown value type {raw}") from None

    def value(self, vtype: GGUFValueType, keep: bool) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string()
        if vtype != GGUFValueType.ARRAY:
            return self.scalar(_SCALARS[vtype])
        return self.array(keep)

    def array(self, keep: bool) -> list | None:
        """An array's entries when `keep`, else None; either way the cursor is past it. Only
        what is kept or walked (strings, whose lengths vary) counts against MAX_ARRAY_ENTRIES."""
        sub_type = self.value_type()
        if sub_type == GGUFValueType.ARRAY:
            raise _Malformed("nested arrays are not used by any model format")
        entry_bytes = 8 if sub_type == GGUFValueType.STRING else struct.calcsize(_SCALARS[sub_type])
        walked = keep or sub_type == GGUFValueType.STRING
        count = self.count("an array", self.scalar("<Q"), entry_bytes, self.entries_left if walked else 2**64)
        if walked:
            self.entries_left -= count
        if sub_type == GGUFValueType.STRING:
            return self.strings(count, keep)
        if not keep:
            self.take(entry_bytes * count)
            return None
        return [item for (item,) in struct.iter_unpack(_SCALARS[sub_type], self.keep(entry_bytes * count))]


def _n_elements(shape: tuple[int, ...]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def _tensor_bytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    return _n_elements(shape) * type_size // block_size


def _fix_hint(path: Path) -> str:
    return f"Delete {path} and run `completer models pull PRESET` to fetch it again, or pass a working GGUF file."


def read_gguf(path: str | Path, keep_arrays: bool = False) -> GGUFContents:
    """Parse a GGUF file's metadata and tensor table, checking every tensor lies inside it.

    Arrays (vocabulary, merges) are skipped unless keep_arrays is set.
    """
    path = Path(path)
    try:
        return _read(path, keep_arrays)
    except OSError as error:  # a file or folder this user may not read (Path.exists raises on those)
        raise NotAModel(f"{path} cannot be read ({error.strerror}). Check its permissions and its folder's, "
                        "or pass another GGUF file.", f"cannot be read ({error.strerror})") from None


def _read(path: Path, keep_arrays: bool) -> GGUFContents:
    if not path.exists():
        raise NotAModel(f"model file not found: {path}. Run `completer models pull PRESET`, or check the path.",
                        "not found")
    if not path.is_file():
        raise NotAModel(f"model path is not a file: {path}. Pass the .gguf file itself.", "not a file")
    size = path.stat().st_size
    if size < 24:
        raise NotAModel(f"{path} is not a GGUF file: {size} bytes. {_fix_hint(path)}",
                        f"not a GGUF file ({size} bytes)")
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        buffer = memoryview(mapped)
        try:
            return _parse(path, buffer, size, keep_arrays)
        except _Malformed as problem:
            raise NotAModel(f"{path} is not a valid GGUF file: {problem}. {_fix_hint(path)}", problem.reason) from None
        finally:
            buffer.release()


def _parse(path: Path, buffer: memoryview, size: int, keep_arrays: bool) -> GGUFContents:
    cursor = _Cursor(buffer)
    if bytes(cursor.take(4)) != GGUF_MAGIC:
        raise _Malformed("it does not start with the GGUF magic", "not a GGUF file")
    version = cursor.scalar("<I")
    if version not in (2, 3):
        raise _Malformed(f"GGUF version {version} (llama.cpp reads 2 and 3)")
    n_tensors = cursor.count("a tensor table", cursor.scalar("<Q"), MIN_TENSOR_BYTES, MAX_TENSORS)
    n_fields = cursor.count("a metadata table", cursor.scalar("<Q"), MIN_FIELD_BYTES, MAX_FIELDS)
    fields: dict[str, Field] = {}
    for _ in range(n_fields):
        key = cursor.string()
        vtype = cursor.value_type()
        if vtype == GGUFValueType.ARRAY:
            start = cursor.offset
            sub_type = cursor.value_type()
            cursor.offset = start
            fields[key] = Field(cursor.value(vtype, keep_arrays), vtype, sub_type)
        else:
            fields[key] = Field(cursor.value(vtype, True), vtype)
    alignment = fields.get("general.alignment", Field(DEFAULT_ALIGNMENT, GGUFValueType.UINT32)).value
    if alignment <= 0 or alignment & (alignment - 1):
        raise _Malformed(f"alignment {alignment} is not a power of two")
    table = []
    for _ in range(n_tensors):
        name = cursor.string()
        n_dims = cursor.scalar("<I")
        if n_dims > 4:
            raise _Malformed(f"tensor {name} has {n_dims} dimensions")
        shape = tuple(cursor.scalar("<Q") for _ in range(n_dims))
        raw_type = cursor.scalar("<I")
        try:
            qtype = GGMLQuantizationType(raw_type)
        except ValueError:
            raise _Malformed(f"tensor {name} has unknown type {raw_type}") from None
        table.append((name, shape, qtype, cursor.scalar("<Q")))
    data_start = -(-cursor.offset // alignment) * alignment
    tensors = []
    for name, shape, qtype, relative in table:
        n_bytes = _tensor_bytes(shape, qtype)
        offset = data_start + relative
        if offset + n_bytes > size:
            problem = f"tensor {name} ends at byte {offset + n_bytes}, the file has {size}"
            raise _Malformed(f"it is truncated: {problem}", f"truncated ({problem})")
        tensors.append(TensorLocation(name, shape, qtype, offset, n_bytes))
    return GGUFContents(path, version, fields, tensors)


@dataclass(frozen=True)
class GGUFHeader:
    """What `completer models info` shows, read without loading weights."""

    path: Path
    architecture: str
    name: str | None
    layers: int
    n_embd: int
    context_length: int
    tokenizer_model: str | None
    file_type: str  # the most common type among matrices, e.g. "Q4_0"
    size_bytes: int


def _model_architecture(contents: GGUFContents) -> tuple[str, int]:
    """(architecture, layers) of a model file, or NotAModel."""
    path = contents.path
    architecture = contents.get("general.architecture")
    if not architecture:
        raise NotAModel(f"{path} has no general.architecture: not a model. {_fix_hint(path)}",
                        "no general.architecture: not a model")
    layers = contents.get(f"{architecture}.block_count")
    if layers is None:
        raise NotAModel(f"{path} has no {architecture}.block_count. {_fix_hint(path)}",
                        f"no {architecture}.block_count: not a model")
    return architecture, int(layers)


def _file_type(tensors: list[TensorLocation]) -> str:
    """The most common type among matrices, e.g. "Q4_0": what a file is said to be quantized to."""
    matrix_types = Counter(t.type.name for t in tensors if len(t.shape) > 1)
    return matrix_types.most_common(1)[0][0] if matrix_types else "none"


def _shard_name(path: Path, number: int, count: int, wanted: int) -> Path | None:
    """Shard `wanted` of the split model whose shard `number` is `path`, named as
    llama.cpp finds it (llama_split_prefix): None when `path` is not named so."""
    postfix = f"-{number:05d}-of-{count:05d}.gguf"
    if not path.name.endswith(postfix) or path.name == postfix:
        return None
    return path.with_name(f"{path.name.removesuffix(postfix)}-{wanted:05d}-of-{count:05d}.gguf")


def first_shard(path: Path) -> Path | None:
    """The first shard of the split model whose later shard `path` is, by its name; None
    for any other file."""
    named = SHARD_NAME.fullmatch(path.name)
    if named is None or int(named["number"]) <= 1:
        return None
    return path.with_name(f"{named['prefix']}-00001-of-{named['count']}.gguf")


def model_shards(contents: GGUFContents) -> list[GGUFContents]:
    """The headers of every file of the model whose first file `contents` is: itself, or
    each shard of a split model in order. NotAModel for a later shard, or a shard missing
    or not of this model (llama.cpp would refuse them)."""
    path, count = contents.path, int(contents.get(SPLIT_COUNT, 0))
    number = int(contents.get(SPLIT_NO, 0)) + 1
    if count <= 1:
        return [contents]
    first = _shard_name(path, number, count, 1)
    if first is None:
        raise NotAModel(f"{path} is shard {number} of {count} of a split model, but not named "
                        f"NAME-{number:05d}-of-{count:05d}.gguf, by which llama.cpp finds the others. Rename it.",
                        f"shard {number} of {count} of a split model, not named as llama.cpp finds the others")
    if number != 1:
        raise NotAModel(f"{path} is shard {number} of {count} of a split model: pass its first shard, {first}.",
                        f"shard {number} of {count} of a split model: llama.cpp loads it through the first, "
                        f"{first.name}")
    shards = [contents]
    for number in range(2, count + 1):
        shards.append(_shard(path, _shard_name(path, 1, count, number), number, count))
    return shards


def _shard(first: Path, path: Path, number: int, count: int) -> GGUFContents:
    """Shard `number` of the split model whose first shard is `first`, or NotAModel."""
    try:
        contents = read_gguf(path)
    except NotAModel as problem:
        reason = problem.reason
    else:
        found = (int(contents.get(SPLIT_NO, -1)) + 1, int(contents.get(SPLIT_COUNT, 0)))
        if found == (number, count):
            return contents
        reason = f"it says it is shard {found[0]} of {found[1]}"
    raise NotAModel(f"{first} is the first of {count} shards of a split model; shard {number} ({path}): {reason}. "
                    f"{_fix_hint(first)}", f"shard {number} of {count} ({path.name}): {reason}")


def _size_bytes(shards: list[GGUFContents]) -> int:
    return sum(shard.path.stat().st_size for shard in shards)


def check_gguf(path: str | Path) -> GGUFHeader:
    """Validate a GGUF model file (every shard of a split one) and return its header, or
    raise ModelError saying what to do."""
    contents = read_gguf(path)
    shards = model_shards(contents)
    architecture, layers = _model_architecture(contents)
    return GGUFHeader(
        path=contents.path,
        architecture=architecture,
        name=contents.get("general.name"),
        layers=layers,
        n_embd=int(contents.get(f"{architecture}.embedding_length", 0)),
        context_length=int(contents.get(f"{architecture}.context_length", 0)),
        tokenizer_model=contents.get("tokenizer.ggml.model"),
        file_type=_file_type([tensor for shard in shards for tensor in shard.tensors]),
        size_bytes=_size_bytes(shards),
    )


def vocabulary(path: str | Path) -> tuple[str | None, list[str]]:
    """(tokenizer model, token texts by id) of a GGUF file."""
    contents = read_gguf(path, keep_arrays=True)
    tokens = contents.get("tokenizer.ggml.tokens")
    if not tokens:
        raise ModelError(f"{path} has no vocabulary (tokenizer.ggml.tokens). {_fix_hint(Path(path))}")
    return contents.get("tokenizer.ggml.model"), tokens


def check_same_vocabulary(target: str | Path, draft: str | Path) -> None:
    """Refuse a draft whose tokens mean something else than the target's.

    Speculative decoding compares token ids, so the two vocabularies must agree on
    every id they share; a few padding entries more or less are allowed.
    """
    target_model, target_tokens = vocabulary(target)
    draft_model, draft_tokens = vocabulary(draft)
    problem = None
    if target_model != draft_model:
        problem = f"tokenizer {draft_model!r} is not the target's {target_model!r}"
    elif abs(len(target_tokens) - len(draft_tokens)) > MAX_VOCAB_SIZE_DIFFERENCE:
        problem = f"{len(draft_tokens)} tokens against the target's {len(target_tokens)}"
    else:
        for token_id, (t, d) in enumerate(zip(target_tokens, draft_tokens)):
            if t != d:
                problem = f"token {token_id} is {d!r} in the draft but {t!r} in the target"
                break
    if problem:
        raise ModelError(
            f"draft {draft} does not share the vocabulary of target {target}: {problem}. "
            "Use a draft from the same model family (`completer models list` shows the presets' pairs)."
        )


# How llama.cpp finds a vocabulary's fill-in-the-middle tokens (src/llama-vocab.cpp,
# llama_vocab::impl::load, as pinned): the id a metadata key gives (the newer key, or the
# deprecated one after it), else a token spelled one of these ways. models/llama.py
# reads the ids llama.cpp found; model_facts finds them here without loading llama.cpp.
FIM_PREFIX = (("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"),
              ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
               "<|code_prefix|>", "<|prefix|>"))
FIM_SUFFIX = (("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"),
              ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
               "<|code_suffix|>", "<|suffix|>"))
FIM_MIDDLE = (("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"),
              ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
               "<|code_middle|>", "<|middle|>"))


def has_fim_tokens(prefix: int | None, suffix: int | None, middle: int | None) -> bool:
    """Whether a vocabulary can fill in the middle: it needs all three control tokens
    (pad, repository and file separator are optional extras)."""
    return None not in (prefix, suffix, middle)


def fim_token_id(contents: GGUFContents, keys: tuple[str, ...], spellings: tuple[str, ...]) -> int | None:
    """The id llama.cpp takes for one FIM token (see FIM_PREFIX): a key's value when it
    names a token (a later key wins), else a token with one of the spellings."""
    tokens = contents.get("tokenizer.ggml.tokens") or []
    found = None
    for key in keys:
        value = contents.get(key)
        if isinstance(value, int) and 0 <= value < len(tokens):
            found = value
    if found is not None:
        return found
    wanted = set(spellings)
    return next((token_id for token_id, text in enumerate(tokens) if text in wanted), None)


@dataclass(frozen=True)
class ModelFacts:
    """What a model file is, read from its header and tensor table without loading it."""

    architecture: str
    parameters: int  # weights in all tensors
    quantization: str  # the most common matrix type, e.g. "Q4_0"
    size_bytes: int
    context_length: int  # tokens it was trained on; 0 when the file does not say
    has_fim: bool
    is_chat: bool  # it carries a chat template
    tokenizer_model: str | None
    n_tokens: int
    vocabulary_id: str  # equal for files whose token ids mean the same: a target and its drafts
    kv_bytes_per_token: int  # an f16 KV cache, all layers
    sliding_window: int  # tokens some layers attend to; 0 when every layer sees the whole context
    shards: int  # files: more than one for a split model, loaded through the first (its path)


def model_facts(path: str | Path) -> ModelFacts:
    """The facts of a GGUF model file, or NotAModel (a ModelError) saying why it is none."""
    contents = read_gguf(path, keep_arrays=True)
    path = contents.path
    if contents.get("general.architecture") == "clip":
        raise NotAModel(f"{path} is a vision projector (clip), not a language model. Pass the model itself.",
                        "a vision projector (clip), not a language model")
    shards = model_shards(contents)
    tensors = [tensor for shard in shards for tensor in shard.tensors]
    if not tensors:
        raise NotAModel(f"{path} holds a vocabulary only, no weights. Pass a model file.",
                        "vocabulary only, no weights")
    architecture, _ = _model_architecture(contents)
    fim = [fim_token_id(contents, keys, spellings) for keys, spellings in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)]
    return ModelFacts(
        architecture=architecture,
        parameters=sum(_n_elements(t.shape) for t in tensors),
        quantization=_file_type(tensors),
        size_bytes=_size_bytes(shards),
        context_length=int(contents.get(f"{architecture}.context_length", 0)),
        has_fim=has_fim_tokens(*fim),
        is_chat=contents.get("tokenizer.chat_template") is not None,
        tokenizer_model=contents.get("tokenizer.ggml.model"),
        n_tokens=len(contents.get("tokenizer.ggml.tokens") or []),
        vocabulary_id=vocabulary_id(contents),
        kv_bytes_per_token=kv_bytes_per_token(contents, architecture),
        sliding_window=int(contents.get(f"{architecture}.attention.sliding_window", 0)),
        shards=len(shards),
    )


def vocabulary_id(contents: GGUFContents) -> str:
    """A short digest of what token ids mean: the tokenizer, every token's text in order
    and the special tokens' ids. Files with equal ids can draft for each other."""
    special = sorted((key, field.value) for key, field in contents.fields.items()
                     if key.startswith("tokenizer.ggml.") and key.endswith("_token_id"))
    described = [contents.get("tokenizer.ggml.model"), contents.get("tokenizer.ggml.tokens") or [], special]
    # JSON keeps the token boundaries: ["ab", "c"] and ["a", "bc"] differ.
    return hashlib.sha256(json.dumps(described, ensure_ascii=False).encode()).hexdigest()[:12]


def _per_layer(value: int | list[int] | None, layers: int) -> list[int] | None:
    """A hyperparameter as one value per layer: some architectures store a list."""
    if value is None:
        return None
    return [int(v) for v in value] if isinstance(value, list) else [int(value)] * layers


def kv_bytes_per_token(contents: GGUFContents, architecture: str) -> int:
    """Bytes an f16 KV cache holds per token: over layers, K and V heads times their
    lengths, 2 bytes each. 0 for a model without attention heads (a recurrent one)."""
    layers = int(contents.get(f"{architecture}.block_count", 0))
    heads = _per_layer(contents.get(f"{architecture}.attention.head_count"), layers)
    if not heads or not heads[0]:
        return 0
    kv_heads = _per_layer(contents.get(f"{architecture}.attention.head_count_kv"), layers) or heads
    # llama.cpp's default key and value length: the embedding split among layer 0's heads.
    head_size = int(contents.get(f"{architecture}.embedding_length", 0)) // heads[0]
    key_length = int(contents.get(f"{architecture}.attention.key_length", head_size))
    value_length = int(contents.get(f"{architecture}.attention.value_length", head_size))
    return sum(kv_heads) * (key_length + value_length) * 2  # f16: 2 bytes a value

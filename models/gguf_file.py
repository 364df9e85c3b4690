"""Reading GGUF files: validation, metadata, vocabularies, tensor locations.

llama.cpp can abort the whole process on some malformed files, so every file is
read here first, with a bounds check on every read: a missing, truncated or
corrupt file becomes one clear ModelError. This parser is small and fast
(gguf.GGUFReader builds an array per vocabulary entry: 3.6 s for SmolLM2's
header, this takes about 0.1 s); the `gguf` package supplies the constants and,
in models/derive.py, the writer.
"""

import mmap
import struct
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


class _Malformed(Exception):
    pass


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
    """Reads little-endian GGUF values from a buffer, refusing to read past its end."""

    def __init__(self, buffer: memoryview):
        self.buffer = buffer
        self.offset = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.offset + n > len(self.buffer):
            raise _Malformed(f"needs {n} bytes at offset {self.offset}, past the end of the file")
        view = self.buffer[self.offset : self.offset + n]
        self.offset += n
        return view

    def scalar(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.take(self.scalar("<Q"))
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as error:
            raise _Malformed(f"a string is not UTF-8 ({error})") from None

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
        sub_type = self.value_type()
        count = self.scalar("<Q")
        if sub_type == GGUFValueType.ARRAY:
            raise _Malformed("nested arrays are not used by any model format")
        if sub_type == GGUFValueType.STRING:
            items = [self.string() for _ in range(count)]
            return items if keep else None
        fmt = _SCALARS[sub_type]
        raw = self.take(struct.calcsize(fmt) * count)
        return [item for (item,) in struct.iter_unpack(fmt, raw)] if keep else None


def _tensor_bytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    n_elements = 1
    for dim in shape:
        n_elements *= dim
    return n_elements * type_size // block_size


def _fix_hint(path: Path) -> str:
    return f"Delete {path} and run `completer models pull PRESET` to fetch it again, or pass a working GGUF file."


def read_gguf(path: str | Path, keep_arrays: bool = False) -> GGUFContents:
    """Parse a GGUF file's metadata and tensor table, checking every tensor lies inside it.

    Arrays (vocabulary, merges) are skipped unless keep_arrays is set.
    """
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model file not found: {path}. Run `completer models pull PRESET`, or check the path.")
    if not path.is_file():
        raise ModelError(f"model path is not a file: {path}. Pass the .gguf file itself.")
    size = path.stat().st_size
    if size < 24:
        raise ModelError(f"{path} is not a GGUF file: {size} bytes. {_fix_hint(path)}")
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        buffer = memoryview(mapped)
        try:
            return _parse(path, buffer, size, keep_arrays)
        except _Malformed as problem:
            raise ModelError(f"{path} is not a valid GGUF file: {problem}. {_fix_hint(path)}") from None
        finally:
            buffer.release()


def _parse(path: Path, buffer: memoryview, size: int, keep_arrays: bool) -> GGUFContents:
    cursor = _Cursor(buffer)
    if bytes(cursor.take(4)) != GGUF_MAGIC:
        raise _Malformed("it does not start with the GGUF magic")
    version = cursor.scalar("<I")
    if version not in (2, 3):
        raise _Malformed(f"GGUF version {version} (llama.cpp reads 2 and 3)")
    n_tensors, n_fields = cursor.scalar("<Q"), cursor.scalar("<Q")
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
            raise _Malformed(f"it is truncated: tensor {name} ends at byte {offset + n_bytes}, the file has {size}")
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


def check_gguf(path: str | Path) -> GGUFHeader:
    """Validate a GGUF model file and return its header, or raise ModelError saying what to do."""
    contents = read_gguf(path)
    path = contents.path
    architecture = contents.get("general.architecture")
    if not architecture:
        raise ModelError(f"{path} has no general.architecture: not a model. {_fix_hint(path)}")
    layers = contents.get(f"{architecture}.block_count")
    if layers is None:
        raise ModelError(f"{path} has no {architecture}.block_count. {_fix_hint(path)}")
    matrix_types = [t.type.name for t in contents.tensors if len(t.shape) > 1]
    return GGUFHeader(
        path=path,
        architecture=architecture,
        name=contents.get("general.name"),
        layers=int(layers),
        n_embd=int(contents.get(f"{architecture}.embedding_length", 0)),
        context_length=int(contents.get(f"{architecture}.context_length", 0)),
        tokenizer_model=contents.get("tokenizer.ggml.model"),
        file_type=max(set(matrix_types), key=matrix_types.count) if matrix_types else "none",
        size_bytes=path.stat().st_size,
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

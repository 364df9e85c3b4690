"""Files the project makes from other GGUF files, written atomically into the cache.

A derived draft keeps the target's embeddings, first L blocks and final norm (and
its tied output head): the same vocabulary by construction, and a fraction of the
target's cost per token. `completer distill` trains one; this only cuts it.
"""

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

from completer.models.atomic import write_atomically
from completer.models.errors import ModelError
from completer.models.gguf_file import TensorLocation, read_gguf

_BLOCK = re.compile(r"blk\.(\d+)\.")
_PLAIN_DTYPES = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}


def rewrite_gguf(
    source: Path,
    destination: Path,
    values: dict[str, Any] | None = None,
    keep_tensor: Callable[[TensorLocation], bool] = lambda tensor: True,
    replacements: dict[str, tuple[np.ndarray, GGMLQuantizationType]] | None = None,
) -> Path:
    """Copy a GGUF file with some metadata values replaced and some tensors left out.

    Tensor data is copied as stored (quantized blocks included), so the copy is
    exact and deterministic; `replacements` gives new float32 data (numpy order) for
    some tensors, stored as the type given.
    """
    contents = read_gguf(source, keep_arrays=True)
    architecture = contents.get("general.architecture")
    values = values or {}
    replacements = replacements or {}

    def write(path: Path) -> None:
        writer = GGUFWriter(path, architecture)
        for key, field in contents.fields.items():
            if key != "general.architecture":  # the writer adds it itself
                writer.add_key_value(key, values.get(key, field.value), field.type, field.sub_type)
        data = np.memmap(source, dtype=np.uint8, mode="r")
        for tensor in filter(keep_tensor, contents.tensors):
            if tensor.name in replacements:
                array, qtype = replacements[tensor.name]
                if qtype == GGMLQuantizationType.F32:
                    writer.add_tensor(tensor.name, array.astype(np.float32))
                else:
                    writer.add_tensor(tensor.name, quantize(array, qtype), raw_dtype=qtype)
                continue
            raw = data[tensor.offset : tensor.offset + tensor.n_bytes]
            numpy_shape = tuple(reversed(tensor.shape))
            if tensor.type in _PLAIN_DTYPES:
                writer.add_tensor(tensor.name, raw.view(_PLAIN_DTYPES[tensor.type]).reshape(numpy_shape))
            else:
                block_size, type_size = GGML_QUANT_SIZES[tensor.type]
                byte_shape = numpy_shape[:-1] + (numpy_shape[-1] // block_size * type_size,)
                writer.add_tensor(tensor.name, raw.reshape(byte_shape), raw_dtype=tensor.type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    return write_atomically(destination, write)


def derive_draft(target: Path, layers: int, destination: Path) -> Path:
    """Write a GGUF of the target's first `layers` blocks to `destination`."""
    contents = read_gguf(target)
    architecture = contents.get("general.architecture")
    total = contents.get(f"{architecture}.block_count")
    if not 0 < layers < total:
        raise ModelError(f"a draft cut from {target} needs 1 to {total - 1} layers, not {layers}.")

    def in_first_layers(tensor: TensorLocation) -> bool:
        block = _BLOCK.match(tensor.name)
        return block is None or int(block.group(1)) < layers

    values = {
        f"{architecture}.block_count": layers,
        "general.name": f"{contents.get('general.name', target.stem)} (first {layers} layers)",
    }
    return rewrite_gguf(target, destination, values, in_first_layers)

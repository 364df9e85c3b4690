"""A draft that is the target under another temperature: the smol target with its final
norm's weight scaled by `scale`.

The output head is linear in the final norm's output, so every logit of the copy is
`scale` times the target's: sampled at temperature T, it is the target sampled at
T / scale. Its proposals overlap the target's partially (scale 0.7: a flatter draft),
so an acceptance rule is exercised on both sides of min(1, p / q); at temperature 0
it has the target's argmax but at near ties, so greedy rounds run long."""

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType

from completer.models.derive import rewrite_gguf
from completer.models.gguf_file import read_gguf


def tempered_draft(target: Path, scale: float, destination: Path) -> Path:
    contents = read_gguf(target)
    norm = next(tensor for tensor in contents.tensors if tensor.name == "output_norm.weight")
    assert norm.type == GGMLQuantizationType.F32, norm.type
    weight = np.memmap(target, dtype=np.float32, mode="r", offset=norm.offset, shape=(norm.n_bytes // 4,))
    replacements = {"output_norm.weight": (scale * np.asarray(weight), GGMLQuantizationType.F32)}
    return rewrite_gguf(target, destination, replacements=replacements)

"""A smol target whose vocabulary has StarCoder's FIM control tokens, to run the FIM
path (template detection, control-token prompts, PSM suffix cost) through llama.cpp.

SmolLM2 shares StarCoder's `<repo_name>` and `<file_sep>` but has no FIM tokens; three
control tokens it never uses in code (`<jupyter_start>`, `<jupyter_text>`,
`<jupyter_code>`) are renamed to `<fim_prefix>`, `<fim_suffix>`, `<fim_middle>`. The
model was not trained to fill in the middle, so its completions show the path works,
not how good a FIM model is."""

from pathlib import Path

from completer.models.derive import rewrite_gguf
from completer.models.gguf_file import read_gguf

RENAMED = {"<jupyter_start>": "<fim_prefix>", "<jupyter_text>": "<fim_suffix>", "<jupyter_code>": "<fim_middle>"}


def fim_variant(target: Path, destination: Path) -> Path:
    if destination.exists():
        return destination
    tokens = list(read_gguf(target, keep_arrays=True).get("tokenizer.ggml.tokens"))
    renamed = [RENAMED.get(token, token) for token in tokens]
    return rewrite_gguf(target, destination, {"tokenizer.ggml.tokens": renamed})

"""A GGUF model as a Hugging Face folder that vLLM loads: run by vLLM's own environment's
Python (models/vllm_env.py), so it imports only what that environment has (torch,
transformers, accelerate, gguf), nothing of completer.

    python vllm_convert.py MODEL.gguf OUT_FOLDER

transformers' GGUF loader dequantizes the weights; save_pretrained refuses a model it
loaded from a quantized file, so the weights are copied into a fresh model built from
the same config, which saves as any other.
"""

import sys
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(loaded.state_dict())
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    convert(Path(sys.argv[1]), Path(sys.argv[2]))

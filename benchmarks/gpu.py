"""The target's verify cost curve and plain decoding speed on an NVIDIA GPU, measured:
what replaces the free-verify projection (docs/bench.md) once a GPU is at hand.

    python -m benchmarks.gpu [--shape 1.5b|3b|7b|14b] [--wheel PATH] [--architectures native]
    python -m benchmarks.gpu --cpu --shape tiny     # the same steps on the CPU, to check the script

1. llama.cpp with CUDA: the installed llama-cpp-python when llama.cpp sees a CUDA
   device; else the --wheel given, else one built for this card by
   completer.models.cuda_wheel (CMAKE_CUDA_ARCHITECTURES=native); installed into this
   environment, and the script started again.
2. A model of a real shape (Qwen2.5-Coder's) with random f16 weights, written into the
   cache with the gguf package: the time of a pass depends on the shapes, not on the
   weights. One matrix per shape is drawn and written for every layer.
3. Every layer on the GPU; the target's pass timed for batch sizes 1 to 16 after a
   512-token prompt (the tuner's own calibration), and plain decoding, one token per
   pass, for 128 tokens.

Besides what it builds, it needs this file, the installed completer and the gguf
package. It prints a table and one JSON line.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, TokenType


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int


# Qwen2.5-Coder's shapes (their config.json), and a tiny one to check the script with.
SHAPES = {
    "tiny": Shape(layers=2, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=4096),  # calibrate uses ids to 2063
    "1.5b": Shape(layers=28, hidden=1536, ffn=8960, heads=12, kv_heads=2, vocab=151936),
    "3b": Shape(layers=36, hidden=2048, ffn=11008, heads=16, kv_heads=2, vocab=151936),
    "7b": Shape(layers=28, hidden=3584, ffn=18944, heads=28, kv_heads=4, vocab=152064),
    "14b": Shape(layers=48, hidden=5120, ffn=13824, heads=40, kv_heads=8, vocab=152064),
}
PROMPT_TOKENS = 512
PLAIN_TOKENS = 128
BATCHES = tuple(range(1, 17))


def byte_tokens() -> list[str]:
    """GPT-2's bytes_to_unicode: each byte as a printable character, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(byte) if byte in printable else chr(next(extra)) for byte in range(256)]


def write_model(path: Path, shape: Shape, seed: int = 0) -> Path:
    """A Qwen2-architecture GGUF of `shape` with random f16 weights."""
    rng = np.random.default_rng(seed)
    head = shape.hidden // shape.heads
    tokens = byte_tokens() + [f"<|filler_{i}|>" for i in range(shape.vocab - 257)] + ["<|endoftext|>"]
    types = [TokenType.NORMAL] * 256 + [TokenType.CONTROL] * (shape.vocab - 256)
    drawn: dict[tuple[int, ...], np.ndarray] = {}

    def weights(*dims: int) -> np.ndarray:  # numpy order: [out, in]
        if dims not in drawn:
            drawn[dims] = (rng.standard_normal(dims, dtype=np.float32) / np.sqrt(dims[-1])).astype(np.float16)
        return drawn[dims]

    writer = GGUFWriter(path, "qwen2")
    writer.add_name(f"synthetic qwen2 {shape}")
    writer.add_context_length(32768)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(1)  # mostly F16
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["Ġ t", "h e"])
    writer.add_eos_token_id(shape.vocab - 1)
    writer.add_add_bos_token(False)
    writer.add_tensor("token_embd.weight", weights(shape.vocab, shape.hidden))
    ones = np.ones(shape.hidden, dtype=np.float32)
    for block in range(shape.layers):
        name = f"blk.{block}."
        writer.add_tensor(name + "attn_norm.weight", ones)
        writer.add_tensor(name + "attn_q.weight", weights(shape.heads * head, shape.hidden))
        writer.add_tensor(name + "attn_q.bias", np.zeros(shape.heads * head, dtype=np.float32))
        for kv in ("k", "v"):
            writer.add_tensor(name + f"attn_{kv}.weight", weights(shape.kv_heads * head, shape.hidden))
            writer.add_tensor(name + f"attn_{kv}.bias", np.zeros(shape.kv_heads * head, dtype=np.float32))
        writer.add_tensor(name + "attn_output.weight", weights(shape.hidden, shape.heads * head))
        writer.add_tensor(name + "ffn_norm.weight", ones)
        writer.add_tensor(name + "ffn_gate.weight", weights(shape.ffn, shape.hidden))
        writer.add_tensor(name + "ffn_up.weight", weights(shape.ffn, shape.hidden))
        writer.add_tensor(name + "ffn_down.weight", weights(shape.hidden, shape.ffn))
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", weights(shape.vocab, shape.hidden) * np.float16(0.5))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def cuda_devices() -> list[str]:
    from completer.models.devices import devices

    return [device.summary() for device in devices() if device.backend == "CUDA"]


def install_cuda_build(wheel: Path | None, architectures: str) -> None:
    """Install the CUDA wheel given, or one built for this card, into this environment."""
    if shutil.which("nvidia-smi") is None:
        raise SystemExit("no nvidia-smi: this needs a machine with an NVIDIA GPU and its driver (or --cpu)")
    if wheel is None:
        built = subprocess.run([sys.executable, "-m", "completer.models.cuda_wheel", "--architectures",
                                architectures], stdout=subprocess.PIPE, text=True, check=True)
        wheel = Path(built.stdout.strip().splitlines()[-1])
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True)


def measure(path: Path, on_gpu: bool) -> dict:
    from completer.engine.tuning import calibrate
    from completer.models.llama import LlamaContext, LlamaModel

    model = LlamaModel(path, "auto" if on_gpu else 0)
    context = LlamaContext(model, n_ctx=PROMPT_TOKENS + PLAIN_TOKENS + 64, n_batch=PROMPT_TOKENS)
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, 256, PROMPT_TOKENS)]
    costs = calibrate(context, budget_s=20.0, batches=BATCHES)
    context.truncate(0)
    context.eval(prompt, 0)
    token, started = prompt[-1], time.perf_counter()
    for step in range(PLAIN_TOKENS):
        token = int(context.eval([token], PROMPT_TOKENS + step, logits_at=[0], argmax=True)[0])
    plain_s = time.perf_counter() - started
    return {"gpu_layers": model.gpu_layers, "layers": model.n_layers,
            "verify_ms": {n: round(costs.verify_ms[n], 3) for n in BATCHES},
            "plain_tokens_per_s": round(PLAIN_TOKENS / plain_s, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=SHAPES, default="1.5b", help="the model's shape (default 1.5b)")
    parser.add_argument("--wheel", type=Path, help="a CUDA build of llama-cpp-python to install instead of building")
    parser.add_argument("--architectures", default="native", help="CMAKE_CUDA_ARCHITECTURES to build for")
    parser.add_argument("--cpu", action="store_true", help="measure on the CPU (to check the script)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if not args.cpu and not cuda_devices():
        if os.environ.get("COMPLETER_GPU_BENCH_INSTALLED"):
            raise SystemExit("the CUDA build is installed, and llama.cpp still sees no CUDA device: check "
                             "`nvidia-smi` and `completer doctor`")
        install_cuda_build(args.wheel, args.architectures)
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks.gpu", *(argv or sys.argv[1:])],
                  {**os.environ, "COMPLETER_GPU_BENCH_INSTALLED": "1"})
    from completer.models.paths import cache_dir

    path = cache_dir() / "synthetic" / f"qwen2-{args.shape}-f16.gguf"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_model(path.with_suffix(".partial"), SHAPES[args.shape]).rename(path)
    result = {"shape": args.shape, "device": "CPU" if args.cpu else "; ".join(cuda_devices()),
              **measure(path, on_gpu=not args.cpu)}
    one = result["verify_ms"][1]
    print(f"{result['device']}: synthetic qwen2 {args.shape} (f16), {result['gpu_layers']} of "
          f"{result['layers'] + 1} layers on the GPU")
    print("batch  ms      in single steps")
    for n, ms in result["verify_ms"].items():
        print(f"{n:>5}  {ms:>6.2f}  {ms / one:.2f}")
    print(f"plain decoding: {result['plain_tokens_per_s']} tokens/s; all of it took "
          f"{time.perf_counter() - started:.0f} s")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`completer distill`'s settings, apart from models/distill.py so that the CLI can show
them without importing torch."""

from dataclasses import dataclass

from gguf import GGMLQuantizationType

from completer.models.errors import ModelError

LOSSES = ("tv", "kl")
INITS = ("first-and-last", "first")
TEACHERS = ("torch", "llama.cpp")
PRECISIONS = ("auto", "bfloat16", "float32")
# Types llama.cpp runs fast on a CPU. Q8_0, the default, keeps what any training learnt;
# Q4_0's rounding (4 bits a weight) can be larger than a short training's changes, and
# its lower cost per token did not show above noise (docs/distill.md, "Export").
QUANTIZE_TYPES = {"Q8_0": GGMLQuantizationType.Q8_0, "Q4_0": GGMLQuantizationType.Q4_0}


@dataclass(frozen=True)
class DistillSettings:
    layers: int = 4  # blocks in the draft: 4 of smol's 30 cost about 0.22 of a target step
    # What the draft's blocks start as. first-and-last: the target's first L-1 blocks and
    # its last one, which already writes what the head reads; first: its first L blocks.
    # 120 steps on huggingface_hub, held-out greedy acceptance on 31 windows spread over
    # the held-out files: first 0.344, first-and-last 0.368 (blocks 0, 1, 28, 29: 0.323).
    init: str = "first-and-last"
    minutes: float | None = None  # stop training after this long (None: only `steps` stops it)
    steps: int | None = None  # stop after this many optimizer steps
    window: int = 256  # tokens per training sequence: a function or two of context
    batch: int = 4  # sequences per step
    # AdamW, after a 20-step warm-up, decayed linearly to a tenth. 120 steps on
    # huggingface_hub took held-out greedy acceptance from 0.012 to 0.324 at 1e-3, 0.375 at
    # 3e-3, 0.358 at 6e-3.
    learning_rate: float = 3e-3
    # kl: forward KL(p || q); tv: total variation, 1 - acceptance directly. TV's gradient
    # fades where the untrained draft gives the target's tokens almost no probability:
    # 40 steps on huggingface_hub took held-out greedy acceptance from 0.01 to 0.19 with
    # KL and to 0.13 with TV (sampled acceptance 0.26 both).
    loss: str = "kl"
    # Added to the loss: this weight times the cross-entropy of the target's most likely
    # token. At temperature 0 a drafted token is accepted only when it is that token, and
    # a draft this small cannot match the whole distribution. Same 120 steps: 0 -> 0.344,
    # 1 -> 0.361, 3 -> 0.357; with first-and-last, 1 -> 0.372 (sampled acceptance 0.424
    # -> 0.444: it rose too).
    top_token_weight: float = 1.0
    top_k: int = 32  # teacher probabilities kept per position; the rest is one tail bucket
    holdout: float = 0.1  # share of files held out for the acceptance estimate
    held_out_windows: int = 16  # of those, sequences evaluated at each report, spread over all the files
    quantize: str = "Q8_0"
    # torch: the target read into torch, a batch of windows per pass; llama.cpp: the
    # target as served, window by window. Held-out figures always come from llama.cpp.
    # torch by default: a batch per pass teaches faster than llama.cpp's window by window
    # (docs/distill.md, "Teacher", has the times).
    teacher: str = "torch"
    # Matrix products in bfloat16 (weights and losses stay float32). auto: where the
    # hardware has it (AMX or AVX512-BF16, a GPU that does bfloat16), float32 elsewhere.
    precision: str = "auto"
    seed: int = 0

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise ModelError(f"loss must be one of {', '.join(LOSSES)}, not {self.loss!r}")
        if self.init not in INITS:
            raise ModelError(f"init must be one of {', '.join(INITS)}, not {self.init!r}")
        if self.top_token_weight < 0:
            raise ModelError(f"top_token_weight must be 0 or more, not {self.top_token_weight}")
        if self.quantize not in QUANTIZE_TYPES:
            raise ModelError(f"quantize must be one of {', '.join(QUANTIZE_TYPES)}, not {self.quantize!r}")
        if self.teacher not in TEACHERS:
            raise ModelError(f"teacher must be one of {', '.join(TEACHERS)}, not {self.teacher!r}")
        if self.precision not in PRECISIONS:
            raise ModelError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.minutes is None and self.steps is None:
            raise ModelError("say when to stop: --minutes or --steps")

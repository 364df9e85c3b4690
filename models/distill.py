"""`completer distill`: train a draft on the user's own code so the target accepts more
of what it proposes. Needs the `distill` extra (torch).

The draft starts as the target's first L-1 blocks and its last one (or its first L),
with its embeddings, final norm and tied head, and learns to match the target's
next-token distribution on the source files under the data paths. The teacher is the
target read into torch from the same GGUF file, a batch of windows per pass, or
(--teacher llama.cpp) the target as it is served; its top-k probabilities are kept per
position. Held-out figures always come from llama.cpp, the judge. Each position's
acceptance under speculative sampling is a = sum(min(p, q)) = 1 - TV(p, q), so the
total-variation loss optimises acceptance directly; forward KL is offered too. At
temperature 0 a drafted token is accepted when it is the target's argmax: the held-out
"greedy acceptance" reported is that rate, and the loss adds that token's cross-entropy.

Only the blocks and the final norm train: the embeddings (and the tied head) stay the
target's, bit for bit, which keeps the vocabulary identical and halves the work of
every backward pass on a CPU.
"""

import hashlib
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType

from completer.models.llama import LlamaContext, LlamaModel
from completer.models.derive import rewrite_gguf
from completer.models.distill_settings import QUANTIZE_TYPES, DistillSettings
from completer.models.errors import ModelError
from completer.models.gguf_file import read_gguf
from completer.models.sources import source_files
from completer.models.torch_model import Transformer, load_transformer


@dataclass
class Corpus:
    train: list[np.ndarray]  # windows of token ids, [window] each
    held_out: list[np.ndarray]
    train_files: int
    held_out_files: int


def corpus_files(paths: list[Path], languages: Collection[str]) -> list[Path]:
    """Source files of `languages` under the paths: .gitignore respected (read without git),
    vendored, generated, minified and binary files skipped (the rules `completer bench`
    uses); a path that is a file is taken as it is."""
    files = []
    for root in paths:
        root = root.resolve()
        if root.is_file():
            files.append(root)
            continue
        for language_files in source_files(root, languages).values():
            files.extend(language_files)
    return sorted(set(files))


def held_out(path: Path, share: float) -> bool:
    """A stable split by file: the same files are held out on every run."""
    return int(hashlib.sha1(str(path).encode()).hexdigest()[:8], 16) / 0x1_0000_0000 < share


def windows(tokens: list[int], length: int) -> list[np.ndarray]:
    """Consecutive windows of `length` tokens; a tail of under half a window is dropped."""
    starts = range(0, max(len(tokens) - length // 2, 1), length)
    return [np.array(tokens[start : start + length], dtype=np.int64) for start in starts
            if len(tokens[start : start + length]) >= length // 2]


def build_corpus(files: list[Path], tokenize: Callable[[str], list[int]], settings: DistillSettings) -> Corpus:
    train, test, train_files, test_files = [], [], 0, 0
    split = [held_out(path, settings.holdout) for path in files]
    if len(files) >= 2 and all(split) or not any(split):  # both sides need a file
        split = [index == 0 for index in range(len(files))]
    for path, is_held_out in zip(files, split):
        text = path.read_text(encoding="utf-8", errors="replace")
        pieces = windows(tokenize(text), settings.window)
        (test if is_held_out else train).extend(pieces)
        test_files += is_held_out
        train_files += not is_held_out
    if not train or not test:
        raise ModelError(f"too little code to distill on: {len(files)} source files, "
                         f"{len(train)} training and {len(test)} held-out windows of {settings.window} tokens. "
                         "Point --data at a repository with more code.")
    return Corpus(train, test, train_files, test_files)


@dataclass(frozen=True)
class TeacherTargets:
    ids: torch.Tensor  # [T, top_k] token ids, most likely first
    probs: torch.Tensor  # [T, top_k]


def evenly_spaced(items: list, count: int) -> list:
    """`count` of `items` spread evenly over the list (all of them if there are fewer): held-out
    windows from every held-out file, not the first file's alone."""
    if len(items) <= count:
        return list(items)
    return [items[index * len(items) // count] for index in range(count)]


def by_length(windows: list[np.ndarray]) -> dict[int, list[int]]:
    """Indices of the windows, grouped by length: each group runs as one batch."""
    groups: dict[int, list[int]] = {}
    for index, window in enumerate(windows):
        groups.setdefault(len(window), []).append(index)
    return groups


def uses_bfloat16(precision: str, device: torch.device) -> bool:
    """Whether matrix products run in bfloat16: asked for, or (auto) fast on `device`."""
    if precision != "auto":
        return precision == "bfloat16"
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    # Private but stable since torch 2.3; without them, float32 is the safe choice.
    amx = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
    return amx or getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()


class Teacher(ABC):
    """The target's next-token distribution: its top-k per position. Each window's is
    computed once and kept (k=32 costs 384 bytes a position), so later epochs and every
    held-out measurement reuse it."""

    def __init__(self, top_k: int):
        self.top_k = top_k
        self.kept: dict[int, TeacherTargets] = {}

    @abstractmethod
    def logits(self, windows: list[np.ndarray]) -> list[torch.Tensor]:
        """Each window's logits, [T, vocab]."""

    def targets(self, keys: list[int], windows: list[np.ndarray]) -> list[TeacherTargets]:
        missing = [index for index, key in enumerate(keys) if key not in self.kept]
        for index, logits in zip(missing, self.logits([windows[index] for index in missing])):
            probs, ids = logits.float().softmax(-1).topk(self.top_k, dim=-1)  # [T, k], most likely first
            self.kept[keys[index]] = TeacherTargets(ids, probs)
        return [self.kept[key] for key in keys]


class LlamaCppTeacher(Teacher):
    """The target as it is served: llama.cpp on the GGUF file. The judge of every
    held-out figure."""

    def __init__(self, model: LlamaModel, settings: DistillSettings):
        super().__init__(settings.top_k)
        self.context = LlamaContext(model, n_ctx=settings.window, n_batch=settings.window)

    def logits(self, windows: list[np.ndarray]) -> list[torch.Tensor]:
        return [torch.from_numpy(window_logits(self.context, tokens)) for tokens in windows]


def window_logits(context: LlamaContext, tokens: np.ndarray) -> np.ndarray:
    """llama.cpp's logits at every position of `tokens`, from an empty cache: [T, vocab]."""
    context.truncate(0)
    return context.eval(tokens.tolist(), 0, logits_at=list(range(len(tokens))))


class TorchTeacher(Teacher):
    """The same target read into torch (models/torch_model.py): a batch of windows in one
    pass, its matrices in bfloat16 where that is fast. Its argmax is llama.cpp's on 96%
    of held-out positions of huggingface_hub (96.8% in float32, 96.2% in bfloat16): the
    Q4_0 target's near ties; the held-out figures stay llama.cpp's."""

    def __init__(self, target: Path, settings: DistillSettings, device: torch.device):
        super().__init__(settings.top_k)
        self.model = load_transformer(target).to(device).requires_grad_(False)
        self.bfloat16 = uses_bfloat16(settings.precision, device)
        if self.bfloat16:  # converted once, not at every pass; norms and embeddings stay float32
            for module in self.model.modules():
                if isinstance(module, torch.nn.Linear):
                    module.to(torch.bfloat16)
        self.device = device

    def logits(self, windows: list[np.ndarray]) -> list[torch.Tensor]:
        out: list[torch.Tensor | None] = [None] * len(windows)
        with torch.no_grad(), torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bfloat16):
            for indices in by_length(windows).values():
                batch = torch.from_numpy(np.stack([windows[index] for index in indices])).to(self.device)
                for index, logits in zip(indices, self.model(batch).cpu()):
                    out[index] = logits
        return out


def top_log_probs(student_logits: torch.Tensor, teacher: TeacherTargets) -> torch.Tensor:
    """The student's log-probabilities [T, k] of the teacher's top-k tokens, from its
    logits [T, vocab]."""
    return F.log_softmax(student_logits.float(), dim=-1).gather(-1, teacher.ids)


def gap_from_top(log_q_top: torch.Tensor, teacher: TeacherTargets, loss: str) -> torch.Tensor:
    """Per position [T]: total variation or forward KL between the teacher (its top-k
    and one bucket for the rest) and the student."""
    q_top, p_top = log_q_top.exp(), teacher.probs
    p_tail = (1 - p_top.sum(-1)).clamp_min(0)
    q_tail = (1 - q_top.sum(-1)).clamp_min(1e-9)
    if loss == "tv":
        return 0.5 * ((p_top - q_top).abs().sum(-1) + (p_tail - q_tail).abs())
    return (p_top * (p_top.clamp_min(1e-12).log() - log_q_top)).sum(-1) + p_tail * (
        p_tail.clamp_min(1e-12).log() - q_tail.log())


def distribution_gap(student_logits: torch.Tensor, teacher: TeacherTargets, loss: str) -> torch.Tensor:
    """Per position [T]: `loss` between the teacher and the student's logits [T, vocab]."""
    return gap_from_top(top_log_probs(student_logits, teacher), teacher, loss)


def training_loss(student_logits: torch.Tensor, teacher: TeacherTargets, settings: DistillSettings) -> torch.Tensor:
    """Per position [T]: the distribution gap plus settings.top_token_weight times the
    cross-entropy of the teacher's most likely token, which decides acceptance at
    temperature 0."""
    log_q_top = top_log_probs(student_logits, teacher)
    return gap_from_top(log_q_top, teacher, settings.loss) - settings.top_token_weight * log_q_top[:, 0]


@dataclass
class HeldOut:
    loss: float
    acceptance: float  # expected acceptance when sampling: mean of 1 - TV
    greedy_acceptance: float  # the draft's argmax is the target's: acceptance at temperature 0


@dataclass
class Report:
    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    before: HeldOut | None = None
    after: HeldOut | None = None
    interrupted: bool = False
    history: list[tuple[int, HeldOut]] = field(default_factory=list)


class Distiller:
    """Trains `student` towards `teacher` on `corpus`; `judge` (by default the teacher)
    gives the held-out figures."""

    def __init__(self, student: Transformer, teacher: Teacher, corpus: Corpus, settings: DistillSettings,
                 device: torch.device, judge: Teacher | None = None):
        self.student, self.teacher, self.corpus, self.settings, self.device = student, teacher, corpus, settings, device
        self.judge = judge or teacher
        self.bfloat16 = uses_bfloat16(settings.precision, device)
        student.token_embd.weight.requires_grad_(False)
        self.trainable = [parameter for parameter in student.parameters() if parameter.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=settings.learning_rate, weight_decay=0.0)
        self.generator = np.random.default_rng(settings.seed)
        self.evaluated = evenly_spaced(self.corpus.held_out, settings.held_out_windows)

    def evaluate(self) -> HeldOut:
        self.student.eval()
        gaps, tvs, greedy = [], [], []
        judged = self.judge.targets([-1 - index for index in range(len(self.evaluated))], self.evaluated)
        with torch.no_grad():  # in float32: bfloat16 logits tie, and the argmax would be a coin toss
            for tokens, teacher in zip(self.evaluated, judged):
                logits = self.student(torch.from_numpy(tokens)[None].to(self.device))[0].cpu()
                gaps.append(distribution_gap(logits, teacher, self.settings.loss).mean().item())
                tvs.append(distribution_gap(logits, teacher, "tv").mean().item())
                greedy.append((logits.argmax(-1) == teacher.ids[:, 0]).float().mean().item())
        self.student.train()
        return HeldOut(float(np.mean(gaps)), 1 - float(np.mean(tvs)), float(np.mean(greedy)))

    def batches(self) -> Iterator[list[int]]:
        """Window indices, shuffled, epoch after epoch."""
        while True:
            order = self.generator.permutation(len(self.corpus.train))
            for start in range(0, len(order) - self.settings.batch + 1, self.settings.batch):
                yield order[start : start + self.settings.batch].tolist()

    def learning_rate(self, step: int, done: float) -> float:
        """Warm up over 20 steps, then decay linearly to a tenth as the budget runs out."""
        return self.settings.learning_rate * min(1.0, (step + 1) / 20) * (1 - 0.9 * min(done, 1.0))

    def precision(self):
        """bfloat16 matrix products (AMX, tensor cores) where the settings ask for them;
        the weights and the loss stay float32."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bfloat16)

    def step(self, indices: list[int], step: int, done: float) -> tuple[float, int]:
        """One optimizer step on the windows `indices`: (loss, tokens)."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate(step, done)
        self.optimizer.zero_grad(set_to_none=True)
        windows = [self.corpus.train[index] for index in indices]
        teachers = self.teacher.targets(indices, windows)
        total, tokens = 0.0, sum(len(window) for window in windows)
        for group in by_length(windows).values():  # windows of one length: one batch
            batch = torch.from_numpy(np.stack([windows[index] for index in group])).to(self.device)
            with self.precision():
                logits = self.student(batch)  # [B, T, vocab]
            ids = torch.stack([teachers[index].ids for index in group]).to(self.device)
            probs = torch.stack([teachers[index].probs for index in group]).to(self.device)
            losses = training_loss(logits.flatten(0, 1), TeacherTargets(ids.flatten(0, 1), probs.flatten(0, 1)),
                                   self.settings)
            loss = losses.sum() / tokens  # every position weighs the same
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(self.trainable, 1.0)
        self.optimizer.step()
        return total, tokens

    def run(self, progress: Callable[[Report, float, float], None], report_every_s: float = 60.0) -> Report:
        """Train until the step or time budget is spent, or Ctrl-C; `progress(report,
        loss, done)` after every step. The held-out set is measured before, every
        `report_every_s` and after."""
        settings, report = self.settings, Report()
        report.before = self.evaluate()
        report.history.append((0, report.before))
        start = last_report = time.monotonic()
        budget_s = settings.minutes * 60 if settings.minutes is not None else math.inf
        try:
            for indices in self.batches():
                elapsed = time.monotonic() - start
                done = max(elapsed / budget_s, report.steps / settings.steps if settings.steps else 0.0)
                if done >= 1.0:
                    break
                loss, tokens = self.step(indices, report.steps, done)
                report.steps += 1
                report.tokens += tokens
                report.seconds = time.monotonic() - start
                if time.monotonic() - last_report >= report_every_s:
                    report.history.append((report.steps, self.evaluate()))
                    last_report = time.monotonic()
                progress(report, loss, done)
        except KeyboardInterrupt:  # stop early and keep what was learnt
            report.interrupted = True
        report.seconds = time.monotonic() - start
        report.after = self.evaluate()
        report.history.append((report.steps, report.after))
        return report


def llama_cpp_agreement(target: LlamaModel, draft_path: Path, sequences: list[np.ndarray]) -> float:
    """Share of positions where the draft's argmax is the target's, both run by llama.cpp
    from the GGUF files: the acceptance rate of drafted tokens at temperature 0."""
    draft = LlamaModel(draft_path, 0)
    contexts = [LlamaContext(model, n_ctx=max(len(s) for s in sequences)) for model in (target, draft)]
    agree = total = 0
    for tokens in sequences:
        argmaxes = [window_logits(context, tokens).argmax(-1) for context in contexts]
        agree += int((argmaxes[0] == argmaxes[1]).sum())
        total += len(tokens)
    for context in contexts:
        context.close()
    draft.close()
    return agree / total


def export_draft(target: Path, student: Transformer, quantize: str, destination: Path) -> Path:
    """A GGUF of the trained draft, written atomically: the target's metadata but the
    layer count, its embeddings (and head) as stored, the trained blocks quantized to
    `quantize` (norms and biases stay float32, as llama.cpp keeps them)."""
    contents = read_gguf(target)
    architecture = contents.get("general.architecture")
    qtype = QUANTIZE_TYPES[quantize]
    trained = {name: value.detach().float().cpu().numpy() for name, value in student.gguf_tensors().items()
               if name != "token_embd.weight" and name != "output.weight"}
    replacements = {name: (value, qtype if value.ndim == 2 else GGMLQuantizationType.F32)
                    for name, value in trained.items()}
    layers = student.args.n_layer
    values = {
        f"{architecture}.block_count": layers,
        "general.name": f"{contents.get('general.name', target.stem)} ({layers} blocks, distilled)",
    }
    kept = set(trained) | {"token_embd.weight", "output.weight"}
    return rewrite_gguf(target, destination, values, lambda tensor: tensor.name in kept, replacements)


def draft_blocks(total: int, layers: int, init: str) -> list[int]:
    """The target's blocks a draft of `layers` blocks starts from (settings.init)."""
    if not 0 < layers < total:
        raise ModelError(f"a draft of a {total}-block target needs 1 to {total - 1} layers, not {layers}.")
    if init == "first" or layers == 1:
        return list(range(layers))
    return [*range(layers - 1), total - 1]


def load_student(target: Path, settings: DistillSettings, device: torch.device) -> Transformer:
    contents = read_gguf(target)
    total = contents.get(f"{contents.get('general.architecture')}.block_count")
    try:
        blocks = draft_blocks(total, settings.layers, settings.init)
    except ModelError as error:
        raise ModelError(f"{target.name}: {error}") from None
    return load_transformer(target, blocks=blocks).to(device).train()

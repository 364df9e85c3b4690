"""The llama.cpp bindings: models and contexts on llama-cpp-python's low-level ctypes API.

Two small objects: `LlamaModel` (weights and vocabulary, loaded once) and
`LlamaContext` (a KV cache for one sequence of text, made from a model, with room
for token-tree branches beside it). The engine asks for exactly what speculative
decoding needs: evaluate a batch of tokens at given positions, get the logits of
chosen positions only (or their argmax), score a tree's branches in the same batch
and keep one, and cut the KV cache back to n tokens.
"""

import codecs
import ctypes
import itertools
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import gguf
import llama_cpp
import numpy as np

from completer.models.devices import Device, device_array, offload_devices
from completer.models.errors import ModelError
from completer.models.gguf_file import GGUFHeader, check_gguf, has_fim_tokens

log = logging.getLogger("completer.llama")

# llama.cpp reports why a load failed only through its log; keep its recent errors
# so the error we raise can quote them.
_recent_llama_errors: deque[str] = deque(maxlen=8)
# ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the last line).
# llama.cpp's INFO is a page of metadata and tensor listings per load, and its warnings
# are advice for its own CLI (e.g. "n_ctx_seq < n_ctx_train"): both go to DEBUG and INFO,
# shown by `completer -v`. Errors stay errors.
_LLAMA_LOG_LEVELS = {3: logging.INFO, 4: logging.ERROR}


@llama_cpp.llama_log_callback
def _llama_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    line = text.decode("utf-8", errors="replace").rstrip()
    if not line:
        return
    if level == 4:
        _recent_llama_errors.append(line)
    log.log(_LLAMA_LOG_LEVELS.get(level, logging.DEBUG), "%s", line)


_init_lock = threading.Lock()
_initialized = False


def _init_backend() -> None:
    global _initialized
    with _init_lock:
        if not _initialized:
            llama_cpp.llama_log_set(_llama_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _initialized = True


def gpu_offload_supported() -> bool:
    """Whether llama.cpp has a device to put layers on: a GPU, or an RPC server added
    (models.devices). Not llama_supports_gpu_offload(), which says yes for every build
    with the RPC backend, servers or none."""
    _init_backend()
    return bool(offload_devices())


def system_info() -> str:
    """llama.cpp's own build summary: SIMD features and backends compiled in."""
    _init_backend()
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip()


def default_threads() -> int:
    """The cores this process may run on. llama.cpp gains nothing from more threads than cores."""
    return max(1, len(os.sched_getaffinity(0)))


def resolve_gpu_layers(n_gpu_layers: int | str, n_layers: int, devices: list[Device] | None = None) -> int:
    """`auto` offloads every layer when llama.cpp has a device for them (among `devices`,
    when given), else none."""
    if n_gpu_layers == "auto":
        has_device = bool(devices) if devices is not None else gpu_offload_supported()
        return n_layers + 1 if has_device else 0  # +1: the output layer
    return int(n_gpu_layers)


def ran_out_of_memory(errors: Iterable[str]) -> bool:
    """Whether llama.cpp's error lines say a buffer could not be allocated: its loader
    says "unable to allocate CUDA0 buffer", ggml-alloc "failed to allocate ... buffer of
    size", CUDA itself "out of memory"."""
    return any(re.search(r"\ballocate\b|out of memory", line, re.IGNORECASE) for line in errors)


def fewer_gpu_layers(requested: int) -> list[int]:
    """The GPU layer counts to try in turn when loading runs out of GPU memory: what was
    asked for, then half as many each time, then none (the CPU always works)."""
    counts = [requested]
    while counts[-1] > 0:
        counts.append(counts[-1] // 2)
    return counts


@dataclass(frozen=True)
class SpecialTokens:
    """Token ids of the vocabulary's control tokens; None where the vocabulary has none."""

    bos: int | None
    eos: int | None
    eot: int | None
    fim_prefix: int | None
    fim_suffix: int | None
    fim_middle: int | None
    fim_pad: int | None
    fim_repo: int | None
    file_separator: int | None

    @property
    def has_fim(self) -> bool:
        return has_fim_tokens(self.fim_prefix, self.fim_suffix, self.fim_middle)


def _special_tokens(vocab: "llama_cpp.llama_vocab_p") -> SpecialTokens:
    return SpecialTokens(
        bos=_token_or_none(llama_cpp.llama_vocab_bos(vocab)),
        eos=_token_or_none(llama_cpp.llama_vocab_eos(vocab)),
        eot=_token_or_none(llama_cpp.llama_vocab_eot(vocab)),
        fim_prefix=_token_or_none(llama_cpp.llama_vocab_fim_pre(vocab)),
        fim_suffix=_token_or_none(llama_cpp.llama_vocab_fim_suf(vocab)),
        fim_middle=_token_or_none(llama_cpp.llama_vocab_fim_mid(vocab)),
        fim_pad=_token_or_none(llama_cpp.llama_vocab_fim_pad(vocab)),
        fim_repo=_token_or_none(llama_cpp.llama_vocab_fim_rep(vocab)),
        file_separator=_token_or_none(llama_cpp.llama_vocab_fim_sep(vocab)),
    )


def _token_or_none(token: int) -> int | None:
    return None if token == llama_cpp.LLAMA_TOKEN_NULL else int(token)


# What a model keeps of the text it has read, which decides how a sequence can be cut
# (LlamaContext.cut): attention cells, one per token, can be dropped from any position
# on; a recurrent layer's state sums up every token read so far and cannot.
FULL_ATTENTION = "full attention"
SLIDING_WINDOW = "sliding window"  # attention; the engine keeps the window layers' cells full-size (swa_full)
HYBRID = "hybrid"  # recurrent layers and attention layers
RECURRENT = "recurrent"  # recurrent layers only
CUT_ANYWHERE = (FULL_ATTENTION, SLIDING_WINDOW)
# The architectures whose recurrent state llama.cpp can roll back within a batch (its
# llm_arch_supports_rs_rollback in src/llama-arch.cpp, by GGUF name): for the others it
# quietly sets n_rs_seq to 0, and the engine keeps checkpoints instead.
ROLLBACK_ARCHITECTURES = frozenset({"qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
                                    "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3", "kimi-k3"})


def memory_kind(model: "llama_cpp.llama_model_p") -> str:
    if llama_cpp.llama_model_is_recurrent(model):
        return RECURRENT
    if llama_cpp.llama_model_is_hybrid(model):
        return HYBRID
    return SLIDING_WINDOW if llama_cpp.llama_model_n_swa(model) > 0 else FULL_ATTENTION


class ContextError(ModelError):
    """llama.cpp could not make a context (a KV cache and its compute buffers) for `model`."""

    def __init__(self, message: str, model: "LlamaModel", n_ctx: int):
        super().__init__(message)
        self.model, self.n_ctx = model, n_ctx


class LlamaModel:
    """A GGUF file loaded by llama.cpp: weights (unless vocab_only) and vocabulary."""

    def __init__(self, path: str | Path, n_gpu_layers: int | str = "auto", vocab_only: bool = False,
                 devices: list[Device] | None = None, header: GGUFHeader | None = None):
        """`devices`: the ones layers may go to (devices.offload_devices); None = every
        device llama.cpp has. `header`: the file's check_gguf(), when the caller has read it."""
        self._model = None  # set first: __del__ runs even when loading fails
        self.path = Path(path)
        self.devices = devices
        # A clear error before llama.cpp sees a broken file.
        self.header = header if header is not None else check_gguf(self.path)
        _init_backend()
        requested = 0 if vocab_only else resolve_gpu_layers(n_gpu_layers, self.header.layers, devices)
        self.asked_gpu_layers = requested
        self.gpu_fallback = ""  # what was given up when the GPU could not hold the layers asked for
        started = time.perf_counter()
        self._load(requested, vocab_only)
        self.load_ms = (time.perf_counter() - started) * 1000  # ms
        if not self._model:
            reason = "; ".join(_recent_llama_errors) or "see the log"
            raise ModelError(
                f"llama.cpp could not load {self.path}: {reason}. "
                "Check the file with `completer models info PATH`, or run `completer models pull PRESET` again."
            )
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.architecture = self.header.architecture
        self.memory = memory_kind(self._model)
        self.n_layers = llama_cpp.llama_model_n_layer(self._model)
        self.n_embd = llama_cpp.llama_model_n_embd(self._model)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.special = _special_tokens(self._vocab)
        # Whether a prompt starts with BOS, as the model was trained: Gemma's does (without
        # it Gemma 3 270M answered `    return` with ` " " " "...`, with it ` width *
        # height`); SmolLM2's and Qwen2's do not.
        self.adds_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab)) and self.special.bos is not None
        self._piece_buffer = ctypes.create_string_buffer(256)
        self._breaks_line: dict[int, bool] = {}  # token -> whether its text holds "\n" (breaks_line)
        self._ends: dict[int, bool] = {}  # token -> whether it ends generation (is_end_of_generation)

    def _load(self, requested: int, vocab_only: bool) -> None:
        """llama.cpp's load of the file with `requested` layers on the GPU, or fewer where
        the GPU ran out of memory (`gpu_fallback` says so); `_model` stays None on failure."""
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = vocab_only
        if self.devices is not None:
            chosen = device_array(self.devices)  # llama.cpp copies the list while loading
            params.devices = ctypes.cast(chosen, ctypes.c_void_p)
        for self.gpu_layers in fewer_gpu_layers(requested):
            params.n_gpu_layers = self.gpu_layers
            _recent_llama_errors.clear()
            self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
            if self._model or self.gpu_layers == 0 or not ran_out_of_memory(_recent_llama_errors):
                break  # fewer layers cannot mend anything but memory (a corrupt file fails alike)
            log.warning("%s: %d layers on the GPU failed (%s); trying fewer", self.path.name, self.gpu_layers,
                        "; ".join(_recent_llama_errors) or "out of memory?")
        if self._model and self.gpu_layers < requested:
            self.gpu_fallback = self._fallback_message("")

    def _fallback_message(self, beside: str) -> str:
        return (f"{self.path.name}: the GPU could not hold {self.asked_gpu_layers} layers{beside}; loaded with "
                f"{self.gpu_layers} on the GPU and the rest on the CPU (set the GPU layers lower to skip the "
                "failed tries)")

    def with_fewer_gpu_layers(self, n_ctx: int) -> "LlamaModel":
        """This file loaded again with fewer layers on the GPU (fewer_gpu_layers' next
        count), because a context of `n_ctx` tokens did not fit beside them there: the
        layers' KV cache lives with the layers. This model is closed first, freeing the
        GPU's memory for the new one."""
        fewer = fewer_gpu_layers(self.gpu_layers)[1]
        log.warning("%s: a context of %d tokens did not fit beside %d layers on the GPU; trying %d", self.path.name,
                    n_ctx, self.gpu_layers, fewer)
        self.close()
        model = LlamaModel(self.path, fewer, devices=self.devices, header=self.header)
        model.asked_gpu_layers = self.asked_gpu_layers
        model.gpu_fallback = model._fallback_message(f" beside a KV cache of {n_ctx} tokens")
        return model

    def tokenize(self, text: str, parse_special: bool = False) -> list[int]:
        """Text to token ids, without BOS. Control-token text in a user's file stays plain
        text unless parse_special is set: a file containing "<|endoftext|>" must not end
        the prompt."""
        data = text.encode("utf-8")
        capacity = len(data) + 8  # a byte-level BPE never makes more tokens than bytes
        tokens = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), tokens, capacity, False, parse_special)
        if n < 0:
            raise RuntimeError(f"tokenizer wanted {-n} tokens for {len(data)} bytes")
        return tokens[:n]

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """The bytes a token stands for (a control token's text only if `special`). A
        token can hold part of a UTF-8 character, so callers join bytes before decoding."""
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece_buffer, len(self._piece_buffer), 0,
                                           special)
        if n < 0:
            buffer = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, -n, 0, special)
            return buffer.raw[:n]
        return self._piece_buffer.raw[:n]

    def detokenize(self, tokens: list[int], special: bool = False, whole_characters: bool = False) -> str:
        """Text of the tokens; with `special`, control tokens appear as their text (to show
        a prompt). With `whole_characters`, a character the tokens end partway through
        (generation stopped inside an emoji's bytes) is left out, not shown as U+FFFD."""
        data = b"".join(self.token_bytes(t, special) for t in tokens)
        return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=not whole_characters)

    def token_text(self, token: int) -> str:
        """The vocabulary's stored text of a token (control tokens included), for comparing vocabularies."""
        return (llama_cpp.llama_vocab_get_text(self._vocab, token) or b"").decode("utf-8", errors="replace")

    def is_end_of_generation(self, token: int) -> bool:
        """Known per token once asked: generation asks of every token it made, every round."""
        known = self._ends.get(token)
        if known is None:
            known = self._ends[token] = bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))
        return known

    def breaks_line(self, token: int) -> bool:
        """Whether the token's text holds a line break: a line starts after it. Known per
        token once asked, for the tokens prompts hold, not by reading the whole vocabulary
        (150k tokens for qwen35's)."""
        known = self._breaks_line.get(token)
        if known is None:
            known = self._breaks_line[token] = b"\n" in self.token_bytes(token)
        return known

    def close(self) -> None:
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self):
        self.close()


SEQUENCE = 0  # llama.cpp's sequence id of the text a context holds (branches of a token tree get 1, 2, ...)
# A recurrent state as LlamaContext.checkpoint() keeps it: the ctypes buffer llama.cpp wrote.
Checkpoint = ctypes.Array
_TEXT_ONLY = (SEQUENCE,)


def _context_params(model: LlamaModel, n_ctx: int, n_threads: int | None, n_batch: int,
                    flash_attention: bool | None, branches: int,
                    rollback_tokens: int) -> "llama_cpp.llama_context_params":
    """llama.cpp's context parameters for LlamaContext, each with its reason."""
    params = llama_cpp.llama_context_default_params()
    # llama.cpp's CPU flash attention rounds a batch of n tokens differently from one
    # token at a time (logits up to 1.6 apart, measured on smol); without it a verify
    # batch parts from single steps only at near ties (speculative.NEAR_TIE_LOGITS).
    # On a GPU it saves memory and time, so there it is on by default.
    if flash_attention is None:
        flash_attention = model.gpu_layers > 0
    params.flash_attn_type = (
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attention else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    params.n_ctx = n_ctx
    # A branch is a llama.cpp sequence of its own (1, 2, ...) that shares the text's
    # cells up to where it forks. One unified pool of cells: separate streams would
    # split n_ctx between the sequences and copy the shared prefix on every fork.
    params.n_seq_max = 1 + branches
    params.kv_unified = True
    # A sliding-window model's window layers keep the whole context, not the window
    # alone: the engine cuts a sequence anywhere (a rejected draft, an edit above the
    # cursor), and with a window-sized cache the cells a cut must bring back would be
    # gone. It costs those layers a full-size cache (`completer models info` shows the
    # KV memory). llama_context_default_params sets it (llama-server's default is
    # off); set here so that a change of default cannot make cuts inexact.
    params.swa_full = True
    # Recurrent state: llama.cpp keeps a snapshot after each of a batch's last
    # `rollback_tokens` tokens, so that a rejected draft's tail can be cut (n_rs_seq;
    # llama.cpp sets it back to 0 for an architecture without that rollback). Each
    # snapshot costs one more copy of the recurrent state.
    params.n_rs_seq = rollback_tokens if model.memory not in CUT_ANYWHERE else 0
    params.n_batch = n_batch
    params.n_ubatch = n_batch
    params.n_threads = params.n_threads_batch = n_threads or default_threads()
    params.no_perf = True
    return params


class TokenTrees:
    """LlamaContext's calls for text beside the text: a verify batch's token-tree branches
    (eval_tree, keep_branch) and the forks candidates are decoded in (fork, eval_forks).
    Each branch is a llama.cpp sequence of its own (1, 2, ...) sharing the text's cells
    before it parts; LlamaContext makes the context with room for `branches` of them, and
    these decode through its _decode and cut through its truncate."""

    branches: int
    n_ctx: int
    n_batch: int
    n_vocab: int
    single_token_eval: bool
    decode_ms: float
    logits_ms: float
    _ctx: "llama_cpp.llama_context_p"
    _memory: "llama_cpp.llama_memory_t"

    def eval_tree(self, tokens: list[int], start: int,
                  branches: list[tuple[int, list[int]]]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Evaluate `tokens` at positions start..., and beside them each branch (at, its
        tokens): tokens that replace tokens[at:], in a llama.cpp sequence of its own
        that shares the cells before `at` with the text's. One batch scores a token tree.

        Returns the argmax of every row of `tokens` [len(tokens)] and of every branch's
        [len(branch tokens)] (greedy verification needs no more). The KV cache must hold
        exactly `start` tokens. The branches' cells stay until keep_branch or
        drop_branches, which the caller must call next.
        """
        if len(branches) > self.branches:
            raise ValueError(f"{len(branches)} branches, and the context was made for {self.branches}")
        width = len(tokens) + sum(len(branch) for _, branch in branches)
        if start + width > self.n_ctx:
            raise ValueError(f"{start + width} tokens do not fit the context of {self.n_ctx}")
        for number in range(1, len(branches) + 1):  # each branch sees the text's cells
            llama_cpp.llama_memory_seq_cp(self._memory, SEQUENCE, number, -1, -1)
        entries = [(token, start + i, (SEQUENCE, *(n for n, (at, _) in enumerate(branches, 1) if i < at)))
                   for i, token in enumerate(tokens)]
        for number, (at, branch) in enumerate(branches, 1):
            entries += [(token, start + at + j, (number,)) for j, token in enumerate(branch)]
        best = self._argmax_of(entries)
        ends = np.cumsum([len(tokens), *(len(branch) for _, branch in branches)])
        return best[: len(tokens)], [best[a:b] for a, b in zip(ends[:-1], ends[1:])]

    def keep_branch(self, number: int, at: int, count: int) -> None:
        """Put the first `count` tokens of branch `number` (1-based, of the last
        eval_tree) in place of the text's tokens from position `at` on, and free every branch."""
        self.truncate(at)
        llama_cpp.llama_memory_seq_cp(self._memory, number, SEQUENCE, at, at + count)
        self.drop_branches()

    def fork(self, number: int, length: int) -> None:
        """Branch `number` (1-based) holds the text's first `length` cells, shared with
        it: a candidate that parts from the text there, decoded with eval_forks."""
        llama_cpp.llama_memory_seq_rm(self._memory, number, -1, -1)
        llama_cpp.llama_memory_seq_cp(self._memory, SEQUENCE, number, 0, length)

    def eval_forks(self, rows: list[tuple[int, int, list[int]]]) -> list[np.ndarray]:
        """Evaluate, in one batch, each fork's (number, start, tokens): tokens at positions
        start... in branch `number` alone, which must hold exactly `start` cells. Returns
        the argmax of every row, per fork."""
        entries = [(token, start + i, (number,)) for number, start, tokens in rows for i, token in enumerate(tokens)]
        if any(start + len(tokens) > self.n_ctx for _, start, tokens in rows):
            raise ValueError(f"a candidate does not fit the context of {self.n_ctx}")
        best = self._argmax_of(entries)
        ends = np.cumsum([0, *(len(tokens) for _, _, tokens in rows)])
        return [best[a:b] for a, b in zip(ends[:-1], ends[1:])]

    def cut_fork(self, number: int, length: int) -> None:
        """Branch `number` keeps its first `length` cells."""
        llama_cpp.llama_memory_seq_rm(self._memory, number, length, -1)

    def drop_branches(self) -> None:
        """Free the cells only branches hold."""
        for number in range(1, self.branches + 1):
            llama_cpp.llama_memory_seq_rm(self._memory, number, -1, -1)

    def _argmax_of(self, entries: list[tuple[int, int, tuple[int, ...]]]) -> np.ndarray:
        """Decode `entries` (token, position, sequences) in batches of n_batch (one token
        each with single_token_eval), with logits at every row: the argmax of each row."""
        best = np.empty(len(entries), np.int64)
        step = 1 if self.single_token_eval else self.n_batch
        for chunk_start in range(0, len(entries), step):
            chunk = entries[chunk_start : chunk_start + step]
            started = time.perf_counter()
            self._decode([e[0] for e in chunk], [e[1] for e in chunk], [e[2] for e in chunk], range(len(chunk)))
            decoded = time.perf_counter()
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self._ctx), shape=(len(chunk), self.n_vocab))
            best[chunk_start : chunk_start + len(chunk)] = logits.argmax(axis=1)
            self.decode_ms += (decoded - started) * 1000
            self.logits_ms += (time.perf_counter() - decoded) * 1000
        return best


class LlamaContext(TokenTrees):
    """One model's KV cache for one sequence of tokens, and the calls to fill, cut, save
    and restore it. Documents take turns in it: the one left is saved and restored when
    the editor comes back (Engine.activate, completer/engine/generation.py; the snapshots in
    completer/engine/documents.py)."""

    def __init__(
        self,
        model: LlamaModel,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        flash_attention: bool | None = None,
        single_token_eval: bool = False,
        branches: int = 0,
        rollback_tokens: int = 0,
    ):
        """`branches`: how many token-tree branches eval_tree may verify beside the text.
        `rollback_tokens`: on a model with recurrent state, how many of a batch's last
        tokens cut() can take back (where llama.cpp can: `self.rollback_tokens` says)."""
        self._ctx = None  # set first: __del__ runs even when creation fails
        self.model = model
        self.branches = branches
        # One token per llama_decode: a batch then gets the logits (and leaves the KV) of
        # plain one-token steps bit for bit, so a verify batch cannot flip a near tie.
        # The KV is then a function of the tokens alone, whatever batches filled it.
        # Slower (no batched kernels): for tests and `completer bench --exact`.
        self.single_token_eval = single_token_eval
        params = _context_params(model, n_ctx, n_threads, n_batch, flash_attention, branches, rollback_tokens)
        _recent_llama_errors.clear()
        self._ctx = llama_cpp.llama_init_from_model(model._model, params)
        if not self._ctx:
            raise ContextError(
                f"llama.cpp could not create a context of {n_ctx} tokens for {model.path}: "
                f"{'; '.join(_recent_llama_errors) or 'see the log'}. Lower n_ctx or the GPU layers.", model, n_ctx
            )
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self.n_batch = llama_cpp.llama_n_batch(self._ctx)  # llama.cpp caps it at n_ctx
        self.n_threads = llama_cpp.llama_n_threads(self._ctx)  # as llama.cpp took the threads asked for
        self.rollback_tokens = llama_cpp.llama_n_rs_seq(self._ctx)
        self.cuts_anywhere = model.memory in CUT_ANYWHERE
        # Where the last llama_decode of the text began: llama.cpp's rollback snapshots
        # are of that batch's tokens, so a cut to before its first token is none of theirs.
        self._batch_start = 0
        self.n_vocab = model.n_vocab
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1 + branches)
        # Time spent in llama_decode and in copying logits out, since creation: what
        # `completer bench --profile` sets against a pass's whole time (two clock reads
        # per call, under a microsecond against milliseconds).
        self.decode_ms = 0.0
        self.logits_ms = 0.0

    def eval(self, tokens: list[int], start: int, logits_at: tuple[int, ...] | list[int] = (),
             argmax: bool = False) -> np.ndarray:
        """Evaluate `tokens` at positions start...

        Returns the logits of the tokens at indices `logits_at` (negative counts from
        the end), as float32 [len(logits_at), n_vocab]; with `argmax`, only the index of
        each one's largest logit [len(logits_at)], read where llama.cpp left the logits
        (greedy decoding needs no more, and copying a row out costs as much as reading
        it). The KV cache must hold exactly `start` tokens: truncate first.
        """
        n = len(tokens)
        wanted = sorted({i % n for i in logits_at}) if n else []
        if start + n > self.n_ctx:
            raise ValueError(f"{start + n} tokens do not fit the context of {self.n_ctx}")
        rows = np.empty(len(wanted), np.int64) if argmax else np.empty((len(wanted), self.n_vocab), np.float32)
        done = 0  # rows filled
        step = 1 if self.single_token_eval else self.n_batch
        for chunk_start in range(0, n, step):
            chunk = tokens[chunk_start : chunk_start + step]
            want_here = [i - chunk_start for i in wanted if chunk_start <= i < chunk_start + len(chunk)]
            started = time.perf_counter()
            self._decode(chunk, range(start + chunk_start, start + chunk_start + len(chunk)),
                         itertools.repeat(_TEXT_ONLY), want_here)
            decoded = time.perf_counter()
            if want_here:
                # llama.cpp keeps the logits of the flagged tokens in batch order.
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self._ctx),
                                               shape=(len(want_here), self.n_vocab))
                rows[done : done + len(want_here)] = logits.argmax(axis=1) if argmax else logits
                done += len(want_here)
            self.decode_ms += (decoded - started) * 1000
            self.logits_ms += (time.perf_counter() - decoded) * 1000
        order = [i % n for i in logits_at]
        if order == wanted:
            return rows
        row_of = {position: row for row, position in enumerate(wanted)}
        return rows[[row_of[i] for i in order]]  # [len(logits_at), ...]

    def _decode(self, tokens: list[int], positions, sequences, logits_at) -> None:
        """One llama_decode: token i at positions[i], in the sequences sequences[i]."""
        batch = self._batch
        batch.n_tokens = len(tokens)
        wanted = set(logits_at)
        for i, (token, position, owners) in enumerate(zip(tokens, positions, sequences)):
            batch.token[i] = token
            batch.pos[i] = position
            batch.n_seq_id[i] = len(owners)
            for j, owner in enumerate(owners):
                batch.seq_id[i][j] = owner
            batch.logits[i] = i in wanted
        status = llama_cpp.llama_decode(self._ctx, batch)
        self._batch_start = batch.pos[0]
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status} at position {positions[0]}")

    def cut(self, n: int) -> bool:
        """Drop positions n.., keeping the first n tokens, if llama.cpp can; False, with
        the cache unchanged, where it cannot. Attention cells can be cut anywhere; a
        recurrent state only back to n = 0, or within the last batch's final
        `rollback_tokens` tokens, once (llama_memory_recurrent::seq_rm)."""
        if not self.cuts_anywhere and 0 < n < self.length():
            # llama.cpp takes a rollback past the last batch's first token too, and its
            # snapshots then hold no state of those positions: a single-token batch
            # rolled back by one token gave wrong logits on qwen35 (tests/engine/test_memory_kinds.py).
            if n <= self._batch_start or self.length() - n > self.rollback_tokens:
                return False
        return bool(llama_cpp.llama_memory_seq_rm(self._memory, SEQUENCE, n, -1))

    def truncate(self, n: int) -> None:
        """cut(n), or RuntimeError where llama.cpp refuses."""
        if not self.cut(n):
            raise RuntimeError(f"llama.cpp refused to truncate the {self.model.memory} cache at {n}")

    def can_take_back(self, width: int) -> bool:
        """Whether a batch of `width` tokens evaluated next can be cut back to where it
        started with cut(): llama.cpp keeps rollback snapshots within one batch only."""
        return self.cuts_anywhere or (width <= self.rollback_tokens and not self.single_token_eval
                                      and width <= self.n_batch)

    def checkpoint(self) -> Checkpoint:
        """The recurrent state at the sequence's current length, to go back to with
        return_to(): of a hybrid model, the recurrent layers' alone (its attention cells
        are cut to the checkpoint's length instead of being copied). Kept in the buffer
        llama.cpp wrote it to: each copy of a state is tens of MB at a 0.5B model's
        shapes (52 MB for Mamba-2's), and bytes of it would cost two more copies, one
        out and one back in, each into fresh memory."""
        flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = llama_cpp.llama_state_seq_get_size_ext(self._ctx, SEQUENCE, flags)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data_ext(self._ctx, buffer, size, SEQUENCE, flags)
        return buffer if written == size else (ctypes.c_uint8 * written).from_buffer(buffer)

    def return_to(self, checkpoint: Checkpoint, length: int) -> None:
        """Hold the first `length` tokens again, from a checkpoint() taken at that length
        while they were the ones held. On failure the cache is emptied and RuntimeError raised."""
        _recent_llama_errors.clear()
        flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        restored = llama_cpp.llama_state_seq_set_data_ext(self._ctx, checkpoint, len(checkpoint), SEQUENCE, flags)
        self._batch_start = length  # no snapshot is of these tokens now
        # The recurrent state now ends at `length`: the attention cells after it go alone.
        if restored == 0 or not llama_cpp.llama_memory_seq_rm(self._memory, SEQUENCE, length, -1):
            self.truncate(0)
            reason = "; ".join(_recent_llama_errors) or "see the log"
            raise RuntimeError(f"llama.cpp could not go back to a checkpoint at {length}: {reason}")

    def length(self) -> int:
        """Tokens held (the highest position + 1; 0 when empty)."""
        return llama_cpp.llama_memory_seq_pos_max(self._memory, SEQUENCE) + 1

    def save(self) -> bytes:
        """The KV state, to keep in RAM while the cells serve another document."""
        size = llama_cpp.llama_state_seq_get_size(self._ctx, SEQUENCE)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self._ctx, buffer, size, SEQUENCE)
        return ctypes.string_at(buffer, written)  # one copy; slicing a ctypes array builds a list of ints

    def restore(self, state: bytes) -> None:
        """Put a state from save() back, replacing what the cache held. On failure the
        cache is left empty (never half-restored) and RuntimeError is raised."""
        self.truncate(0)
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        _recent_llama_errors.clear()
        if llama_cpp.llama_state_seq_set_data(self._ctx, buffer, len(state), SEQUENCE) == 0:
            self.truncate(0)  # llama.cpp clears it itself today; the caller's bookkeeping relies on it
            reason = "; ".join(_recent_llama_errors) or "see the log"
            raise RuntimeError(f"llama.cpp could not restore a {len(state)}-byte state: {reason}")
        self._batch_start = self.length()  # no snapshot is of these tokens now

    def close(self) -> None:
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None

    def __del__(self):
        self.close()


def requantize(source: Path, destination: Path, file_type: str, n_threads: int | None = None) -> None:
    """Convert a GGUF to another llama.cpp file type (e.g. "Q4_0"), writing `destination`."""
    _init_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{file_type}")
    params.allow_requantize = True
    params.nthread = n_threads or default_threads()
    # The embedding stays Q8_0 as shipped; left to llama.cpp it asks for Q6_K, which
    # needs rows of 256 and falls back with a warning on small models.
    params.token_embedding_type = params.output_tensor_type = int(gguf.GGMLQuantizationType.Q8_0)
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(destination).encode(), ctypes.byref(params))
    if status != 0:
        raise ModelError(f"llama.cpp could not convert {source} to {file_type} (status {status}).")

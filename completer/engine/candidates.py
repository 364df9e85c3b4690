"""Several candidates for one completion, as llama.vim's n_cmpl offers: the generation,
and beside it texts that part from it where the target's two most likely tokens were
close, each the runner-up token there and greedy after it.

    generation (its logits kept) -> branch points: the positions with the smallest gap
      between the chosen token's logit and the runner-up's (at most MAX_GAP)
    -> each branch a llama.cpp sequence sharing the generation's cells before its point
    -> rounds: every unfinished branch's last token and its copy draft (the generation's
       text after the point, where the branch rejoins it) in one batch, accepted greedily;
       after a draft the target rejected, a branch drafts again only once its text is
       realigned with the generation's (REALIGNED tokens matched), else it takes plain steps
    -> the same stops as the generation (an end token, a stop string, done, max_tokens,
       the time budget), and no more tokens than the generation has: one cut there is
       shown as at a time-budget stop, whole lines only (stop reason "time")

A branch often rejoins the generation a token or two after its point (another name, the
same call around it), so its copy draft is accepted in long runs; where it does not, a
round's batch holds a token per branch.
"""

import logging
import time
from dataclasses import dataclass

import numpy as np

from completer.engine.drafts import CopyDrafter
from completer.engine.generation import Engine, Generation, GenerationRequest, generated_text, stop_after_round
from completer.engine.kv import common_prefix_length
from completer.engine.speculative import accept_greedy
from completer.requests import StopReason

log = logging.getLogger(__name__)

# A runner-up whose logit is more than this below the chosen token's is not offered: it
# was under e^-3, 5%, as likely as the chosen token there.
MAX_GAP = 3.0
# Tokens of the generation proposed after a branch's last one: 8 is one of the cheap
# batch sizes on a CPU, where llama.cpp's batched kernels change at size thresholds
# (measured: docs/speculative-decoding.md, "Measurements behind the engine's constants"),
# and a branch that rejoins the generation accepts it whole.
COPY_DRAFT = 8
# Tokens of a branch's end that must match the generation's text for a draft after a
# rejected one: one token matches by chance (a comma, a space), three place the copy.
REALIGNED = 3


@dataclass(frozen=True)
class Candidate:
    text: str
    stop_reason: str  # as Generation.stop_reason
    tokens: list[int]  # the generated tokens
    position: int  # where it parted from the generation: tokens[position] is the runner-up there


def branch_points(logits: np.ndarray, chosen: list[int], count: int, max_gap: float = MAX_GAP
                  ) -> list[tuple[int, int]]:
    """(position, runner-up token) of the `count` positions of `chosen` (the tokens
    `logits` chose, row for row) whose runner-up came closest to the chosen token, by
    position; a tie goes to the earlier position."""
    n = min(len(chosen), len(logits))
    if n == 0 or count <= 0:
        return []
    rows = logits[:n].astype(np.float64)
    picked = rows[np.arange(n), chosen[:n]]
    rows[np.arange(n), chosen[:n]] = -np.inf
    runner_up = rows.argmax(axis=1)
    gaps = picked - rows[np.arange(n), runner_up]
    close = [j for j in range(n) if np.isfinite(gaps[j]) and gaps[j] <= max_gap]
    return sorted((j, int(runner_up[j])) for j in sorted(close, key=lambda j: (gaps[j], j))[:count])


@dataclass
class _Branch:
    number: int  # its llama.cpp sequence
    position: int  # where it parts from the generation
    tokens: list[int]  # prompt and text so far; the last is not yet evaluated
    held: int  # cells its sequence holds
    copy: CopyDrafter
    limit: int  # tokens it may generate: as many as the generation, or max_tokens
    drafting: bool = True  # its last draft was accepted whole (at first: it may rejoin at once)
    stop_reason: str = ""  # set once it ends
    text: str = ""


def candidates(engine: Engine, request: GenerationRequest, generation: Generation, count: int,
               deadline: float | None = None) -> list[Candidate]:
    """Up to `count` candidates besides `generation` (made by generate from `request` with
    keep_logits), greedy after their first token, with the request's stops; the target's
    cache still holds the generation's text after. Stops at the request's `cancel` (no
    candidates) and at `deadline` (time.perf_counter()'s; those still decoding stop with "time")."""
    if generation.logits is None:
        raise ValueError("candidates need the generation's logits (generate with keep_logits)")
    context = engine.target.context
    if not context.cuts_anywhere:
        return []  # recurrent state: llama.cpp cannot fork a sequence at a position (fork())
    count = min(count, context.branches)
    tokens = list(request.prompt[-(engine.context_tokens - 1):])
    prompt_length = len(tokens)
    chosen = [*generation.tokens, *([generation.end_token] if generation.end_token is not None else [])]
    branches, finished = [], []
    try:
        for number, (position, token) in enumerate(branch_points(generation.logits, chosen, count), 1):
            branch_tokens = [*tokens, *chosen[:position], token]
            held = min(common_prefix_length(engine.target.tokens, branch_tokens), len(branch_tokens) - 1)
            context.fork(number, held)
            limit = min(request.max_tokens, max(len(chosen), position + 1))
            branch = _Branch(number, position, branch_tokens, held, CopyDrafter(chosen[position + 1:], prompt_length),
                             limit)
            _settle(engine, branch, prompt_length, request)
            (finished if branch.stop_reason else branches).append(branch)
        while branches:
            if request.cancel is not None and request.cancel.is_set():
                return []
            if deadline is not None and time.perf_counter() >= deadline:
                for branch in branches:
                    branch.stop_reason = StopReason.TIME
                    branch.text = generated_text(engine, branch.tokens[prompt_length:], request.healing)
                finished += branches
                break
            _round(engine, branches, prompt_length)
            for branch in branches:
                _settle(engine, branch, prompt_length, request)
            finished += [branch for branch in branches if branch.stop_reason]
            branches = [branch for branch in branches if not branch.stop_reason]
    except (RuntimeError, ValueError) as error:  # llama_decode failed, or the context is full
        log.warning("candidates beside the completion stopped: %s", error)
    finally:
        context.drop_branches()
    return [Candidate(branch.text, branch.stop_reason, branch.tokens[prompt_length:], branch.position)
            for branch in sorted(finished, key=lambda b: b.number)]


def _round(engine: Engine, branches: list[_Branch], prompt_length: int) -> None:
    """One batch: each branch's tokens its cells lack and its copy draft, accepted greedily."""
    rows, drafts = [], []
    for branch in branches:
        room = min(branch.limit - (len(branch.tokens) - prompt_length), engine.context_tokens - len(branch.tokens)) - 1
        match = branch.copy.lookup(branch.tokens, min(COPY_DRAFT, room))
        draft = match.tokens if branch.drafting or match.length >= REALIGNED else []
        drafts.append(draft)
        rows.append((branch.number, branch.held, [*branch.tokens[branch.held:], *draft]))
    scored = engine.target.context.eval_forks(rows)
    for branch, draft, best in zip(branches, drafts, scored):
        accepted, next_token = accept_greedy(best[len(best) - len(draft) - 1:], draft)
        branch.drafting = bool(draft) and accepted == len(draft)
        branch.held = len(branch.tokens) + accepted
        engine.target.context.cut_fork(branch.number, branch.held)
        branch.tokens += [*draft[:accepted], next_token]


def _settle(engine: Engine, branch: _Branch, prompt_length: int, request: GenerationRequest) -> None:
    """Whether the branch ends here, as generate's rounds end, or at its limit."""
    stop_reason, text = stop_after_round(engine, branch.tokens, prompt_length, request.stop, request.done,
                                         request.healing)
    if stop_reason == StopReason.MAX_TOKENS:
        if len(branch.tokens) - prompt_length < branch.limit:
            return
        # Cut short: whole lines only.
        stop_reason = StopReason.MAX_TOKENS if branch.limit == request.max_tokens else StopReason.TIME
    del branch.tokens[prompt_length + branch.limit:]
    branch.stop_reason = stop_reason
    branch.text = (text if stop_reason == StopReason.STOP
                   else generated_text(engine, branch.tokens[prompt_length:], request.healing))

"""vLLM's speculative-token schedule by batch size, written from a load bench's measurements.

vLLM (0.32) takes `num_speculative_tokens_per_batch_size` in its speculative config: a list
of (first batch size, last batch size, draft tokens), inclusive ranges from 1 up. Its
scheduler drafts, at each step, the count of the range holding the number of requests in
the step (vllm/v1/core/sched/scheduler.py), at most `num_speculative_tokens`.

Speculation pays while a verify step costs about what a plain step costs: the weights are
read once for every position scored. Once the batch fills the machine's compute, a verify
step costs in proportion to the tokens it scores, and the rejected ones are time taken
from the other requests in the batch. The load bench measures completion latency with
each draft length (0: off) at each number of developers N, which carries both the
acceptance and the cost of a verify batch at that load; the schedule takes at each N the
draft length whose median latency was lowest, from N up to the next N measured.
"""

import json
from dataclasses import dataclass
from statistics import median

Schedule = list[tuple[int, int, int]]  # (first batch size, last batch size, draft tokens), inclusive


@dataclass(frozen=True)
class LoadPoint:
    batch: int  # requests at once: the developers typing into the server
    draft_tokens: int  # a fixed num_speculative_tokens; 0: speculation off
    p50_ms: float  # completion latency, keystroke to answer, in one run


def best_draft_tokens(points: list[LoadPoint]) -> dict[int, int]:
    """At each batch size, the draft length with the lowest median of its runs' p50s; on a
    tie the shorter draft (it costs the others in the batch less)."""
    runs: dict[tuple[int, int], list[float]] = {}
    for point in points:
        runs.setdefault((point.batch, point.draft_tokens), []).append(point.p50_ms)
    best: dict[int, tuple[float, int]] = {}
    for (batch, draft_tokens), p50s in runs.items():
        candidate = (median(p50s), draft_tokens)
        best[batch] = min(best.get(batch, candidate), candidate)
    return {batch: draft_tokens for batch, (_, draft_tokens) in best.items()}


def schedule(points: list[LoadPoint], max_batch: int) -> Schedule:
    """vLLM's ranges: each measured batch size's best draft length from it to the next
    measured one (the first from 1, the last to `max_batch`), equal neighbours merged."""
    best = best_draft_tokens(points)
    if not best:
        raise ValueError("no measurements to write a schedule from")
    batches = sorted(best)
    ranges: Schedule = []
    for index, batch in enumerate(batches):
        first = 1 if index == 0 else batch
        last = batches[index + 1] - 1 if index + 1 < len(batches) else max(max_batch, batch)
        if ranges and ranges[-1][2] == best[batch]:
            ranges[-1] = (ranges[-1][0], last, best[batch])
        else:
            ranges.append((first, last, best[batch]))
    return ranges


def speculative_config(ranges: Schedule, method: dict) -> str:
    """vLLM's --speculative-config for `method` (its "method" and settings, such as
    {"method": "ngram", "prompt_lookup_max": 4}) drafting by `ranges`: its
    num_speculative_tokens is the longest draft there (vLLM wants at least 1)."""
    longest = max([1, *(draft_tokens for _, _, draft_tokens in ranges)])
    return json.dumps({**method, "num_speculative_tokens": longest,
                       "num_speculative_tokens_per_batch_size": [list(entry) for entry in ranges]})

"""A team server's Prometheus metrics (vLLM's /metrics), as `doctor` reads them: whether
it speculates and how deep, what it accepted, its prefix cache, the requests it runs.

vLLM sends no speculative settings over its API, and no timings in its answers; its
metrics say what it did. The speculative counters exist only on a server started with a
--speculative-config, and vllm:spec_decode_num_accepted_tokens_per_pos has one series a
draft position: their number is num_speculative_tokens. Its schedule by batch size
(num_speculative_tokens_per_batch_size) shows in no metric: only in the config that
/server_info serves, on a vLLM started with VLLM_SERVER_DEV_MODE=1. Nor does a request
its client closed: vLLM 0.32's output processor drops it before its statistics see it,
so vllm:request_success_total{finished_reason="abort"} does not count superseded
completions (its log does, with --enable-log-requests).
"""

import math
from dataclasses import dataclass

DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
RUNNING = "vllm:num_requests_running"

Samples = dict[str, list[tuple[dict[str, str], float]]]  # a metric's name -> its (labels, value) series


def parse(text: str) -> Samples:
    """Prometheus' text format: `name{label="value",...} number` a line; comments and
    lines it cannot read are left out (a metric this reader does not use may be anything)."""
    samples: Samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, labels, rest = line, {}, ""
        if "{" in line and "}" in line:
            name, _, tail = line.partition("{")
            label_text, _, rest = tail.rpartition("}")
            labels = dict(read_label(part) for part in split_labels(label_text) if "=" in part)
        else:
            name, _, rest = line.partition(" ")
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        samples.setdefault(name.strip(), []).append((labels, value))
    return samples


def split_labels(text: str) -> list[str]:
    """`a="x",b="y, z"` -> its label pairs: a comma inside a quoted value is the value's."""
    parts, current, quoted, escaped = [], "", False, False
    for character in text:
        if character == "," and not quoted:
            parts.append(current)
            current = ""
            continue
        current += character
        if escaped:
            escaped = False
        elif character == "\\":
            escaped = True
        elif character == '"':
            quoted = not quoted
    return [part for part in [*parts, current] if part.strip()]


def read_label(pair: str) -> tuple[str, str]:
    key, _, value = pair.partition("=")
    return key.strip(), value.strip().strip('"')


def total(samples: Samples, name: str, **labels: str) -> float | None:
    """The sum of a metric's series (those with `labels`); None when the server has none."""
    series = [value for found, value in samples.get(name, []) if all(found.get(k) == v for k, v in labels.items())]
    return math.fsum(series) if series else None


@dataclass(frozen=True)
class ServerMetrics:
    vllm: bool  # it has vLLM's metrics (another server's say none of this)
    drafted: float | None  # draft tokens proposed; None: the server does not speculate
    accepted: float
    draft_positions: int  # tokens a step drafts
    prefix_hits: float | None  # prompt tokens its prefix cache held; None: no prefix cache counted
    prefix_queries: float
    running: float

    @classmethod
    def of(cls, text: str) -> "ServerMetrics":
        samples = parse(text)
        return cls(any(name.startswith("vllm:") for name in samples), total(samples, DRAFTED), total(samples, ACCEPTED) or 0.0,
                   len({labels.get("position") for labels, _ in samples.get(ACCEPTED_PER_POSITION, [])}),
                   total(samples, PREFIX_HITS), total(samples, PREFIX_QUERIES) or 0.0, total(samples, RUNNING) or 0.0)

    def described(self, speculative: dict | None = None) -> dict[str, str]:
        """What doctor shows of it, by name; `speculative`: its speculative config where the
        server says it (OpenAIClient.speculative_config), None where it does not."""
        if not self.vllm:
            return {"metrics": "none of vLLM's"}
        facts = {"drafting": "no (started without --speculative-config)" if self.drafted is None else
                 f"yes, {self.draft_positions} tokens a step" if self.draft_positions else "yes"}
        if self.drafted:
            facts["acceptance so far"] = f"{self.accepted / self.drafted:.0%} of {self.drafted:.0f} drafted tokens"
        if self.drafted is not None:
            facts["backs off under load"] = backs_off(speculative)
        if self.prefix_queries and self.prefix_hits is not None:
            facts["prefix cache"] = f"{self.prefix_hits / self.prefix_queries:.0%} of {self.prefix_queries:.0f} " \
                                    "prompt tokens found"
        facts["requests running"] = f"{self.running:.0f}"
        return facts


def backs_off(speculative: dict | None) -> str:
    """Whether a drafting vLLM drafts less as its batch grows: its schedule by batch size."""
    if speculative is None:
        return ("not shown by the server: vLLM's num_speculative_tokens_per_batch_size is in no metric, and in "
                "/server_info only with VLLM_SERVER_DEV_MODE=1")
    ranges = speculative.get("num_speculative_tokens_per_batch_size")
    if not ranges:
        return f"no: {speculative.get('num_speculative_tokens', '?')} tokens a step at every batch size"
    try:
        steps = ", ".join(f"{int(first)}-{int(last)} requests: {int(tokens)}" for first, last, tokens in ranges)
    except (TypeError, ValueError):
        return f"yes, by a schedule this client cannot read: {ranges!r:.200}"
    return f"yes, tokens a step by batch size: {steps}"

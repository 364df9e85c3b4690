"""The Completer's counters since it started, for `completer/stats`."""

import threading
from dataclasses import dataclass, field, fields

from completer.decoders.decoder import DecodeCounts
from completer.requests import CompleterStats


@dataclass
class Counters:
    """Thread-safe: requests on several worker threads count at once (add, count)."""

    requests: int = 0
    forward_cache_hits: int = 0
    superseded: int = 0
    prompt_tokens: int = 0
    evaluated_tokens: int = 0
    generated_tokens: int = 0
    generation_ms: float = 0.0
    drafted: int = 0
    accepted: int = 0
    warmed_tokens: int = 0  # prompt tokens evaluated ahead of a request (Completer.warm)
    edit_requests: int = 0
    edits_suggested: int = 0
    prefetches: int = 0  # completions computed ahead of an acceptance (Completer.prefetch)
    prefetch_hits: int = 0  # requests answered from one
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, **increments: float) -> None:
        """Each named counter raised by its increment."""
        with self._lock:
            for name, increment in increments.items():
                setattr(self, name, getattr(self, name) + increment)

    def add(self, counts: DecodeCounts | None) -> None:
        """A decoding's counts (None: the decoder could not say)."""
        if counts is not None:
            self.count(**{counted.name: getattr(counts, counted.name) for counted in fields(counts)})

    def stats(self, **state) -> CompleterStats:
        """The counters as statistics, beside the completer's `state` (CompleterStats fields)."""
        with self._lock:
            return CompleterStats(
                requests=self.requests,
                forward_cache_hits=self.forward_cache_hits,
                superseded=self.superseded,
                cache_hit_rate=1 - self.evaluated_tokens / self.prompt_tokens if self.prompt_tokens else 0.0,
                draft_acceptance_rate=self.accepted / self.drafted if self.drafted else 0.0,
                tokens_per_second=self.generated_tokens / self.generation_ms * 1000 if self.generation_ms else 0.0,
                warmed_tokens=self.warmed_tokens,
                edit_requests=self.edit_requests,
                edits_suggested=self.edits_suggested,
                prefetches=self.prefetches,
                prefetch_hits=self.prefetch_hits,
                **state,
            )

"""How loaded a shared server is, from this editor's own answers, and what the client
gives up for it (issue 57: many editors on one server).

    pace       one decoding's milliseconds per generated token, of decodings that made
               at least PACE_MIN_TOKENS (fewer say more of the prompt than of the load)
    alone      the fastest pace seen: the server as it runs with nearly no one else on it
    saturated  the median of the last WINDOW paces is SATURATED_RATIO x `alone` or more
               (judged once PACE_MIN_COUNT paces are in): the server gives this editor
               half the speed it gives it alone, so it is busy with others. Then
               prefetch waits: it takes compute from the other users and delays this
               editor's own next request (extra candidates are the local engine's alone)
    debounce   while saturated, the configured debounce grown to DEBOUNCE_SHARE of the
               median latency (request to answer) of the last WINDOW answers, at most
               DEBOUNCE_MOST_MS: with answers taking 800 ms and keystrokes 150 ms apart, a
               request per keystroke is superseded several times before one lands, and
               each started one costs the server a prompt (Tabby's debouncer adapts the
               same way, to the typing pace). Not before: a server with room answers a
               request as soon as it comes, and a debounce only delays it (the load
               bench with back-off on and off: docs/bench.md).

Only a shared server is judged (DecoderModel.shared): the local engine's pace changes with
its own prompts and drafts, and no one else waits on it.
"""

import statistics
import threading
from collections import deque

WINDOW = 8
PACE_MIN_TOKENS = 4
PACE_MIN_COUNT = 4
SATURATED_RATIO = 2.0
DEBOUNCE_SHARE = 0.5
DEBOUNCE_MOST_MS = 1000.0


class LoadGauge:
    """Thread-safe: answers are recorded from worker threads, read on the event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paces: deque[float] = deque(maxlen=WINDOW)
        self._latencies: deque[float] = deque(maxlen=WINDOW)
        self._alone = float("inf")

    def answered(self, latency_ms: float, generated_tokens: int, generation_ms: float) -> None:
        """A decoding for the user's request (not a prefetch): its latency, and its tokens and their time."""
        with self._lock:
            self._latencies.append(latency_ms)
            if generated_tokens >= PACE_MIN_TOKENS and generation_ms > 0:
                pace = generation_ms / generated_tokens
                self._paces.append(pace)
                self._alone = min(self._alone, pace)

    @property
    def saturated(self) -> bool:
        with self._lock:
            return self._saturated()

    def _saturated(self) -> bool:
        return len(self._paces) >= PACE_MIN_COUNT and statistics.median(self._paces) >= SATURATED_RATIO * self._alone

    def debounce_ms(self, configured_ms: float) -> float:
        """The debounce to wait before a request: `configured_ms`, or more while the server is
        saturated and answers are slow."""
        with self._lock:
            if not self._saturated():
                return configured_ms
            grown = min(DEBOUNCE_SHARE * statistics.median(self._latencies), DEBOUNCE_MOST_MS)
        return max(configured_ms, grown)

    def statistics(self) -> dict:
        """`completer/stats`' part: whether it backs off now, and the debounce it adds."""
        return {"saturated": self.saturated, "adaptive_debounce_ms": round(self.debounce_ms(0.0))}

"""A Decoder without a model, for testing the Completer's own rules in milliseconds.

Its prompts are text (the segments joined, control tokens spelt out), a character is a
token, and it answers from a table: the text of the longest key the prompt ends with
("" when none does), cut at the request's first stop string as a real decoder stops.
`hold()` makes the next decode (or warm) wait until released or cancelled, for
newest-request-wins and prefetch tests; `decodes` records every prompt decoded, and
`calls` counts the calls that change no answer, and `events` holds the document events.
`shared=True` makes it a shared server's (DecoderModel.shared), whose counts say `pace_ms`
per character generated."""

import threading
from collections import Counter

from completer.decoders.decoder import DecodeCounts, Decoded, DecodeRequest, DecoderModel, DocumentEvent, ready
from completer.errors import Cancelled
from completer.prompt import Segment
from completer.requests import StopReason


def joined(segments: list[Segment]) -> tuple[str, int]:
    text = "".join(segment.text for segment in segments)
    return text, len(text)


class FakeDecoder:
    warning = ""

    def __init__(self, answers: dict[str, str] | None = None, context_tokens: int = 4096, shared: bool = False):
        self.answers = dict(answers or {})
        self.model = DecoderModel(None, context_tokens, "the fake's context", encode=joined, count=len,
                                  text_of=str, shared=shared)
        self.pace_ms = 1.0  # the generation's milliseconds per character its counts say (a server's load)
        self.decodes = []  # every Decode, cancelled ones too
        self.calls: Counter[str] = Counter()  # configure, reset, stop_indexing, by name
        self.events: list[DocumentEvent] = []
        self.started = threading.Event()  # set when a decode starts (cleared by hold)
        self._hold: threading.Event | None = None

    def hold(self) -> threading.Event:
        """The next decode waits until the returned event is set, or its request is
        cancelled; `started` is set when it starts."""
        self.started.clear()
        self._hold = threading.Event()
        return self._hold

    def _held(self, cancel: threading.Event) -> None:
        """Waits while the hold asked for the next call is on, until it is released or `cancel` is set."""
        hold, self._hold = self._hold, None
        self.started.set()
        while hold is not None and not hold.wait(0.001):
            if cancel.is_set():
                break

    def answer(self, prompt: str) -> str:
        keys = [key for key in self.answers if prompt.endswith(key)]
        return self.answers[max(keys, key=len)] if keys else ""

    def decode(self, request: DecodeRequest) -> Decoded:
        """Several requests at once, as a server serves them."""
        if request.cancel.is_set():
            raise Cancelled
        prompt = request.prompt(self.model, self.model.context_tokens - request.answer_tokens)
        decode = ready(request, prompt)
        self.decodes.append(decode)
        self._held(decode.cancel)
        if decode.cancel.is_set():
            return Decoded("", StopReason.CANCELLED, None, None, prompt=prompt)
        text, reason = self.answer(decode.prompt), StopReason.END
        cuts = [text.index(stop) for stop in decode.stop if stop and stop in text]
        if cuts:
            text, reason = text[:min(cuts)], StopReason.STOP
        counts = DecodeCounts(decode.prompt_length, decode.prompt_length, len(text), self.pace_ms * len(text), 0, 0)
        return Decoded(text, reason, counts, None, prompt=prompt)

    def warm(self, request: DecodeRequest) -> int:
        """The prompt's length; held as decode is, before the prompt enters the document (as
        the local engine's warm waits for the engine)."""
        self._held(threading.Event())
        return request.prompt(self.model, self.model.context_tokens - request.answer_tokens).length

    def connect(self) -> DecoderModel:
        return self.model

    def statistics(self) -> dict:
        return {}

    def index_workspace(self, workspace) -> None:
        return None

    def document_event(self, event: DocumentEvent) -> None:
        self.events.append(event)

    def __getattr__(self, name: str):
        """configure, reset, stop_indexing: counted, nothing done."""
        if name not in ("configure", "reset", "stop_indexing"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.calls.update([name])

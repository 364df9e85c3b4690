"""A server as the other side of the engine: decoding, speculation (its own
--spec-type or draft model) and the KV cache (`cache_prompt`) live on the server; the
prompt, post-processing and everything else stay here.

    LlamaServerClient   /props (model, slots, context, speculative settings), /tokenize,
                        /detokenize, and a streamed /completion that a cancel flag closes:
                        llama-server stops generating once it finds the connection gone
    OpenAIClient        /v1/models and a streamed /v1/completions (vLLM, llama-server)
    CancelFlag          a request's cancel flag that closes its stream the moment it is
                        set, even while the server is still evaluating the prompt
    SlotMap             documents -> the server's slots, least recently used first out,
                        as the local engine keeps saved KV states per document

Nothing here retries: the caller decides what to tell the user and when to try again.
"""

import http.client
import ipaddress
import json
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# A server on the LAN answers a connection in milliseconds; one that takes seconds is
# down or unreachable, and the editor should hear so before the next keystroke.
CONNECT_TIMEOUT_S = 2.0
# A completion of a few lines on a busy team server: longer is a server in trouble.
TOTAL_TIMEOUT_S = 30.0
# OpenAI's API takes at most four stop strings; post-processing cuts at the others.
OPENAI_STOPS = 4


class ServerError(Exception):
    """The server could not be used for a request; the message says why, once."""


class _Cancelled(Exception):
    """A request's cancel flag closed its connection before the server answered."""


class CancelFlag(threading.Event):
    """A request's cancel flag (a threading.Event, as the local engine polls) that also
    runs what was registered when it is set: a stream blocked reading, while the server
    evaluates a long prompt, is closed at once rather than at its next token."""

    def __init__(self):
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._callbacks_lock = threading.Lock()

    def set(self) -> None:
        with self._callbacks_lock:
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def when_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` when the flag is set (now, if it is); returns what unregisters it."""
        with self._callbacks_lock:
            if not self.is_set():
                self._callbacks.append(callback)
                return lambda: self._discard(callback)
        callback()
        return lambda: None

    def _discard(self, callback: Callable[[], None]) -> None:
        with self._callbacks_lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


def sends_key_safely(url: str) -> bool:
    """A key goes only over https, or to this machine (nothing then crosses a network)."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return True
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ServerProps:
    model: str  # the model file's path on the server
    slots: int
    context_tokens: int  # per slot
    speculative: dict[str, float | int | str] = field(default_factory=dict)  # its speculative.* settings


@dataclass
class RemoteGeneration:
    text: str
    tokens: list[int]
    stop_reason: str  # "end", "stop", "done", "max_tokens", "time", "cancelled"
    tokens_cached: int  # prompt tokens the server's cache already held
    tokens_evaluated: int  # prompt tokens it evaluated
    timings: dict[str, float] = field(default_factory=dict)  # the server's own, ms and counts
    slot: int = -1


STOP_TYPES = {"eos": "end", "word": "stop", "limit": "max_tokens"}


class HttpClient:
    """HTTP to one server: JSON requests, and streams of server-sent events that a cancel
    flag, a `done` check or the total timeout closes."""

    def __init__(self, url: str, api_key: str = "", connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 total_timeout_s: float = TOTAL_TIMEOUT_S):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerError(f"models.server_url {url!r}: give it as http://host:port or https://host:port")
        if api_key and not sends_key_safely(url):
            raise ServerError(f"an API key goes only over https or to this machine, and {url} is neither: "
                              "use https, or an ssh tunnel to 127.0.0.1")
        self.url, self.api_key = url.rstrip("/"), api_key
        self._scheme, self._host = parts.scheme, parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._base = parts.path.rstrip("/")
        self.connect_timeout_s, self.total_timeout_s = connect_timeout_s, total_timeout_s

    def _connection(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return kind(self._host, self._port, timeout=self.connect_timeout_s)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _open(self, method: str, path: str, body: dict | None = None, cancel: threading.Event | None = None
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, Callable[[], None]]:
        """The connection, the response once its headers came, and what unregisters the
        cancel flag's hold on the socket (a CancelFlag shuts it down when set, also while
        the server evaluates the prompt before it answers). _Cancelled when it was set."""
        connection = self._connection()
        unregister: Callable[[], None] = lambda: None  # noqa: E731
        try:
            connection.connect()
            connection.sock.settimeout(self.total_timeout_s)
            if isinstance(cancel, CancelFlag):
                sock = connection.sock
                unregister = cancel.when_set(lambda: _shut(sock))
            connection.request(method, self._base + path, None if body is None else json.dumps(body),
                               self._headers())
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            unregister()
            connection.close()
            if cancel is not None and cancel.is_set():
                raise _Cancelled from None
            raise ServerError(f"{self.url} did not answer {path}: {_reason(error)}") from None
        if response.status != 200:
            text = response.read(2000).decode(errors="replace").strip()
            unregister()
            connection.close()
            raise ServerError(f"{self.url}{path} answered HTTP {response.status}: {_error_text(text)}")
        return connection, response, unregister

    def _json(self, method: str, path: str, body: dict | None = None):
        connection, response, _ = self._open(method, path, body)
        try:
            return json.loads(response.read())
        except (OSError, http.client.HTTPException, ValueError) as error:
            raise ServerError(f"{self.url}{path} sent no JSON: {_reason(error)}") from None
        finally:
            connection.close()

    def _stream(self, path: str, body: dict, text_of: Callable[[dict], str], cancel: threading.Event | None,
                done: Callable[[str], bool] | None, time_budget_ms: float = 0
                ) -> tuple[str, list[dict], str | None]:
        """POST `body` and read its stream of events: (the text, `text_of` each event
        joined; the events; "cancelled", "done" or "time" when it was stopped here, None
        when the server ended it). It stops when `cancel` is set (at once for a
        CancelFlag, else at the next event), when `done` says the text is complete, and
        with `time_budget_ms` at the first line end past it (llama.vim's
        t_max_predict_ms). Closing the stream is how the server learns the request is gone."""
        if cancel is not None and cancel.is_set():
            return "", [], "cancelled"
        try:
            connection, response, unregister = self._open("POST", path, body, cancel)
        except _Cancelled:
            return "", [], "cancelled"
        text: list[str] = []
        events: list[dict] = []
        ended = None
        started, first_at = time.monotonic(), 0.0
        try:
            for line in response:
                if cancel is not None and cancel.is_set():
                    break
                if time.monotonic() > started + self.total_timeout_s:
                    raise ServerError(f"{self.url} took longer than {self.total_timeout_s:.0f} s for one "
                                      "completion")
                payload = line[6:].strip() if line.startswith(b"data: ") else b""
                if not payload:
                    continue
                if payload == b"[DONE]":  # OpenAI's end of a stream
                    break
                event = json.loads(payload)
                if "error" in event:
                    raise ServerError(f"{self.url}{path}: {_error_text(json.dumps(event))}")
                events.append(event)
                text.append(piece := text_of(event))
                if done is not None and done("".join(text)):
                    ended = "done"
                    break
                first_at = first_at or time.monotonic()  # the budget leaves prompt evaluation out
                if time_budget_ms and "\n" in piece and time.monotonic() - first_at > time_budget_ms / 1000:
                    ended = "time"
                    break
        except (OSError, http.client.HTTPException, ValueError) as error:
            if not (cancel is not None and cancel.is_set()):  # else it was closed by the cancel
                raise ServerError(f"{self.url}{path} broke off: {_reason(error)}") from None
        finally:
            unregister()
            connection.close()  # mid-stream: how the server learns the request is gone
        if cancel is not None and cancel.is_set():
            ended = "cancelled"
        return "".join(text), events, ended


class LlamaServerClient(HttpClient):
    """llama-server's own API."""

    def props(self) -> ServerProps:
        props = self._json("GET", "/props")
        settings = props.get("default_generation_settings", {})
        speculative = {key: value for key, value in settings.get("params", settings).items()
                       if key.startswith("speculative")}
        return ServerProps(props.get("model_path", ""), int(props.get("total_slots", 1)),
                           int(settings.get("n_ctx", 0)), speculative)

    def slots(self) -> list[dict]:
        return self._json("GET", "/slots")

    def tokenize(self, text: str, parse_special: bool = True) -> list[int]:
        """The server's tokens of `text`; with `parse_special`, control-token text is
        parsed as control tokens, else as text."""
        return self._json("POST", "/tokenize", {"content": text, "parse_special": parse_special})["tokens"]

    def detokenize(self, tokens: list[int]) -> str:
        """The text of `tokens`, control tokens spelt out."""
        return self._json("POST", "/detokenize", {"tokens": tokens})["content"]

    def complete(self, prompt: list[int], max_tokens: int, slot: int = -1, stop: list[str] | None = None,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, time_budget_ms: float = 0,
                 cancel: threading.Event | None = None, done: Callable[[str], bool] | None = None
                 ) -> RemoteGeneration:
        """Generate after `prompt` (token ids) in `slot`, streamed (HttpClient._stream says
        when it stops early); the server keeps the time budget itself. `max_tokens` 0
        only evaluates the prompt into the slot's cache (llama-server makes one token)."""
        body = {"prompt": prompt, "n_predict": max_tokens, "stream": True, "cache_prompt": True,
                "id_slot": slot, "stop": stop or [], "temperature": temperature, "top_k": top_k, "top_p": top_p,
                "return_tokens": True, "samplers": ["top_k", "top_p", "temperature"]}
        if time_budget_ms:
            body["t_max_predict_ms"] = int(time_budget_ms)
        text, events, ended = self._stream("/completion", body, lambda event: event.get("content", ""), cancel, done)
        tokens = [token for event in events for token in event.get("tokens", [])]
        if ended:
            return RemoteGeneration(text, tokens, ended, 0, 0, slot=slot)
        last = events[-1] if events else {}
        if not last.get("stop"):
            raise ServerError(f"{self.url}/completion broke off before its last message: the server stopped?")
        stop_reason = STOP_TYPES.get(last.get("stop_type", ""), "end")
        if stop_reason == "max_tokens" and len(tokens) < max_tokens:
            stop_reason = "time"  # the only other limit: t_max_predict_ms
        timings = last.get("timings", {})  # its own tokens_cached counts the slot's tokens, the answer's too
        return RemoteGeneration(text, tokens, stop_reason, int(timings.get("cache_n", 0)),
                                int(timings.get("prompt_n", 0)), timings, int(last.get("id_slot", slot)))


class OpenAIClient(HttpClient):
    """An OpenAI-compatible /v1/completions (vLLM, llama-server, others): the prompt as
    text, and no slots (vLLM's prefix cache, or llama-server's choice of the slot whose
    prompt is most alike, keeps each document's cache)."""

    def models(self) -> list[dict]:
        """/v1/models' entries: each has its `id` (vLLM's also `max_model_len`)."""
        models = self._json("GET", "/v1/models").get("data") or []
        if not models:
            raise ServerError(f"{self.url}/v1/models lists no model")
        return models

    def complete(self, model: str, prompt: str, max_tokens: int, stop: list[str] | None = None,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, time_budget_ms: float = 0,
                 cancel: threading.Event | None = None, done: Callable[[str], bool] | None = None
                 ) -> RemoteGeneration:
        """Generate after `prompt`, streamed; the time budget is kept here, by closing the
        stream. The server's counts come from its usage (and llama-server's timings)."""
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                "stream_options": {"include_usage": True}, "temperature": temperature, "top_p": top_p}
        if stop:
            body["stop"] = stop[:OPENAI_STOPS]
        if top_k:  # not OpenAI's, but vLLM and llama-server take it
            body["top_k"] = top_k
        text, events, ended = self._stream("/v1/completions", body, _choice_text, cancel, done, time_budget_ms)
        if ended:
            return RemoteGeneration(text, [], ended, 0, 0)
        finish = next((choice["finish_reason"] for event in events for choice in event.get("choices", [])
                       if choice.get("finish_reason")), None)
        if finish is None:
            raise ServerError(f"{self.url}/v1/completions broke off before its last message: the server stopped?")
        usage = next((event["usage"] for event in reversed(events) if event.get("usage")), {})
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        evaluated = int(usage.get("prompt_tokens", 0)) - cached
        timings = next((event["timings"] for event in reversed(events) if event.get("timings")), None) or {
            "prompt_n": evaluated, "predicted_n": int(usage.get("completion_tokens", 0))}
        return RemoteGeneration(text, [], "max_tokens" if finish == "length" else "stop", cached, evaluated,
                                timings)


def _choice_text(event: dict) -> str:
    return "".join(choice.get("text") or "" for choice in event.get("choices", []))


def _shut(sock: socket.socket | None) -> None:
    """Shut a stream's socket from another thread: the read blocked on it returns."""
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # closed already
            pass


def _reason(error: BaseException) -> str:
    if isinstance(error, socket.timeout | TimeoutError):
        return "timed out"
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def _error_text(text: str) -> str:
    """llama-server's {"error": {"message": ...}}, else the body as it came."""
    try:
        error = json.loads(text).get("error", {})
        return error.get("message", text) if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        return text[:300]


class SlotMap:
    """Which of the server's slots holds each document's prompt cache: a document keeps
    its slot while it is used, and a new one takes a free slot, else the least recently
    used document's."""

    def __init__(self, slots: int):
        self._free = list(range(max(1, slots)))
        self._documents: OrderedDict[str, int] = OrderedDict()  # least recently used first

    def slot_for(self, document: str) -> int:
        if document in self._documents:
            self._documents.move_to_end(document)
        else:
            self._documents[document] = self._free.pop(0) if self._free else self._documents.popitem(last=False)[1]
        return self._documents[document]

    def forget(self, document: str) -> None:
        """The document closed: its slot is free again."""
        slot = self._documents.pop(document, None)
        if slot is not None:
            self._free.insert(0, slot)

"""A server as the other side of the engine: decoding, speculation (its own
--spec-type or draft model) and the KV cache (`cache_prompt`) live on the server; the
prompt, post-processing and everything else stay here.

    LlamaServerClient   /props (model, slots, context, speculative settings), /tokenize,
                        /detokenize, and a streamed /completion that a cancel flag closes:
                        llama-server stops generating once it finds the connection gone
    OpenAIClient        /v1/models and a streamed /v1/completions (vLLM, llama-server)
    (requests.CancelFlag, a request's cancel flag, closes its stream the moment it is
    set, even while the server is still evaluating the prompt)

Nothing here retries: the caller decides what to tell the user and when to try again.
Every call has one deadline (connect, headers, body or stream together), caps on what
it reads, and stops the moment its cancel flag is set.
"""

import http.client
import ipaddress
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import urlsplit

from completer.config import ModelOptions
from completer.engine.speculative import Sampling
from completer.errors import Cancelled, ServerError
from completer.requests import CancelFlag, StopReason

# A client's deadlines unless it is given others: the options' defaults, where their
# reasons are written (models.server_connect_timeout_s, models.server_timeout_s).
_OPTION_DEFAULTS = ModelOptions()
# What one answer may hold; a server sending more is broken or hostile, and reading on
# would hold the editor's memory. The largest JSON asked for is /tokenize of a prompt
# filling a 128k-token context (about 1 MB of ids); /props with a chat template, tens of KB.
MAX_BODY_BYTES = 8 << 20
# One event of a stream: a token's few bytes, but llama-server's last event repeats the
# whole prompt as text (`prompt`: about 4 bytes a token, up to twice that escaped).
MAX_LINE_BYTES = 4 << 20
# A stream brings an event (or fewer) a token asked for, then the events that close it:
# llama-server's last (`stop`, its timings); OpenAI's finish and usage, and room for a
# server that opens with an empty event. A server sending on past them (broken or
# hostile) would be read, and held, until the request's deadline: it is cut there.
CLOSING_EVENTS = 3
# What an event of a token may take, on average, besides the one line of MAX_LINE_BYTES:
# its text and the fields around it (an OpenAI-compatible server's names its model,
# a path perhaps), with room to spare.
TOKEN_EVENT_BYTES = 16 << 10
# HTTP statuses that are one request's fault (its prompt too long, its body refused):
# the server is up and the next request may well pass. Every other 4xx (a wrong key, a
# wrong URL, a rate limit) would refuse every request alike, so it counts as down.
REQUEST_FAULTS = {400, 413, 414, 422}
# The local engine's order (speculative.probabilities): temperature, then top-k, then
# top-p over the tempered distribution. llama-server runs exactly the samplers named, in
# this order (llama.cpp common/sampling.cpp), and none of its defaults (min_p 0.05).
SAMPLERS = ["temperature", "top_k", "top_p"]
# OpenAI's API takes at most four stop strings; post-processing cuts at the others.
OPENAI_STOPS = 4

GREEDY = Sampling()  # complete()'s sampling unless asked: the target's argmax


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
    build: str = ""  # llama.cpp's build, as `b1234-abcdef0`; "" from a server that does not say
    special_texts: tuple[str, ...] = ()  # its vocabulary's end and start tokens, spelt out


@dataclass
class RemoteGeneration:
    text: str
    tokens: list[int]
    stop_reason: str  # "end", "stop", "done", "max_tokens", "time", "cancelled"
    tokens_cached: int  # prompt tokens the server's cache already held
    tokens_evaluated: int  # prompt tokens it evaluated
    timings: dict[str, float] = field(default_factory=dict)  # the server's own, ms and counts
    slot: int = -1


STOP_TYPES = {"eos": StopReason.END, "word": StopReason.STOP, "limit": StopReason.MAX_TOKENS}


@dataclass(frozen=True)
class EventFormat:
    """How a server's stream carries its answer: each event's text, and its tokens (where
    the format counts them; else at least one for an event with text)."""

    text: Callable[[dict], str]
    tokens: Callable[[dict], int]


STREAM_END: dict = {}  # OpenAI's `[DONE]`, as _event reads it


class Streamed(NamedTuple):
    """A stream as HttpClient._stream read it."""

    text: str  # each event's joined
    events: list[dict]
    ended: str | None  # "cancelled", "done", "time" or "max_tokens" when stopped here; None when the server ended it
    # Seconds on this machine's monotonic clock: the request sent, its first event with
    # text, its last: what a server that sends no timings of its own (vLLM) is timed by.
    sent_s: float = 0.0
    first_s: float = 0.0
    last_s: float = 0.0

    def timings(self, prompt_n: int, predicted_n: int) -> dict[str, float]:
        """llama-server's timings, as measured here: prompt_ms up to the first text (the
        prompt's evaluation, and the network's round trip), predicted_ms from it to the
        last, and the tokens after the first a second over that time."""
        predicted_ms = max(0.0, self.last_s - self.first_s) * 1000
        return {"prompt_n": prompt_n, "predicted_n": predicted_n,
                "prompt_ms": max(0.0, self.first_s - self.sent_s) * 1000 if self.first_s else 0.0,
                "predicted_ms": predicted_ms,
                "predicted_per_second": (predicted_n - 1) * 1000 / predicted_ms if predicted_ms else 0.0}


class _Allowance:
    """What a stream asked for `max_tokens` tokens may still bring: those tokens (one when
    none were asked: llama-server makes one all the same), CLOSING_EVENTS more events,
    and TOKEN_EVENT_BYTES an event besides one line of MAX_LINE_BYTES."""

    def __init__(self, max_tokens: int):
        self.tokens = max(max_tokens, 1)
        self.events = self.tokens + CLOSING_EVENTS
        self.most_bytes = self.bytes = MAX_LINE_BYTES + self.events * TOKEN_EVENT_BYTES

    def takes_line(self, size: int) -> bool:
        self.bytes -= size
        return self.bytes >= 0

    def takes_event(self, tokens: int) -> bool:
        """Whether one more event, carrying `tokens`, is within what is left (then spent)."""
        if tokens > self.tokens or self.events < 1:
            return False
        self.tokens, self.events = self.tokens - tokens, self.events - 1
        return True


class _Watch:
    """Shuts a request's socket when its cancel flag is set (a CancelFlag: at once) or its
    deadline passes: a read blocked on a stalled server, or one that sends a byte a second
    and so never lets a socket timeout fire, returns there and then."""

    def __init__(self, sock: socket.socket, cancel: threading.Event | None, seconds: float):
        self.expired = False
        self._timer = threading.Timer(max(0.0, seconds), self._expire, (sock,))
        self._timer.daemon = True
        self._timer.start()
        self._unregister = cancel.when_set(lambda: _shut(sock)) if isinstance(cancel, CancelFlag) else _nothing

    def _expire(self, sock: socket.socket) -> None:
        self.expired = True
        _shut(sock)

    def stop(self) -> None:
        self._timer.cancel()
        self._unregister()


def _nothing() -> None:
    pass


@dataclass
class _Exchange:
    """One request in flight: its connection, the response once its headers came, its watch."""

    connection: http.client.HTTPConnection
    response: http.client.HTTPResponse
    watch: _Watch

    def close(self) -> None:
        self.watch.stop()
        self.connection.close()  # mid-stream: how the server learns the request is gone


class HttpClient:
    """HTTP to one server: JSON requests, and streams of server-sent events that a cancel
    flag, a `done` check or the request's deadline closes."""

    def __init__(self, url: str, api_key: str = "",
                 connect_timeout_s: float = _OPTION_DEFAULTS.server_connect_timeout_s,
                 total_timeout_s: float = _OPTION_DEFAULTS.server_timeout_s):
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

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return kind(self._host, self._port, timeout=timeout_s)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _open(self, method: str, path: str, body: dict | None, cancel: threading.Event | None) -> _Exchange:
        """The request sent and its response's headers read, within the request's deadline
        (total_timeout_s from now, connecting included). Cancelled when the flag was set
        (it is also looked at once connected: a connection attempt is bounded by
        connect_timeout_s alone); ServerError for a status other than 200."""
        if cancel is not None and cancel.is_set():
            raise Cancelled
        deadline = time.monotonic() + self.total_timeout_s
        connection = self._connection(min(self.connect_timeout_s, self.total_timeout_s))
        watch = None
        try:
            connection.connect()
            connection.sock.settimeout(max(0.001, deadline - time.monotonic()))
            watch = _Watch(connection.sock, cancel, deadline - time.monotonic())
            if cancel is not None and cancel.is_set():
                raise Cancelled
            connection.request(method, self._base + path, None if body is None else json.dumps(body),
                               self._headers())
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            if watch is not None:
                watch.stop()
            connection.close()
            raise self._failure(f"{self.url} did not answer {path}", error, cancel, watch) from None
        except Cancelled:
            watch.stop()
            connection.close()
            raise
        exchange = _Exchange(connection, response, watch)
        if response.status != 200:
            try:
                text = response.read(2000).decode(errors="replace").strip()
            except (OSError, http.client.HTTPException):
                text = ""
            exchange.close()
            raise status_error(f"{self.url}{path}", response.status, text)
        return exchange

    def _failure(self, what: str, error: BaseException, cancel: threading.Event | None,
                 watch: _Watch | None) -> Exception:
        """What a request that broke off raises: Cancelled when its flag closed it, else
        the ServerError `what` (the deadline's reason when that was what closed it)."""
        if cancel is not None and cancel.is_set():
            return Cancelled()
        reason = "timed out" if watch is not None and watch.expired else _reason(error)
        if reason == "timed out" and watch is None:  # no connection yet
            reason = f"timed out connecting (models.server_connect_timeout_s is {self.connect_timeout_s:g})"
        elif reason == "timed out":
            reason = f"timed out (models.server_timeout_s is {self.total_timeout_s:g})"
        return ServerError(f"{what}: {reason}")

    def _json(self, method: str, path: str, body: dict | None = None, cancel: threading.Event | None = None):
        """The JSON answer, at most MAX_BODY_BYTES of it; Cancelled or ServerError."""
        try:
            return json.loads(self._body(method, path, body, cancel))
        except ValueError as error:
            raise ServerError(f"{self.url}{path} sent no JSON: {_reason(error)}") from None

    def _body(self, method: str, path: str, body: dict | None = None, cancel: threading.Event | None = None) -> bytes:
        """The answer's body, at most MAX_BODY_BYTES of it; Cancelled or ServerError."""
        exchange = self._open(method, path, body, cancel)
        try:
            data = exchange.response.read(MAX_BODY_BYTES + 1)
            if exchange.watch.expired or (cancel is not None and cancel.is_set()):
                raise self._failure(f"{self.url}{path} did not finish its answer", TimeoutError(), cancel,
                                    exchange.watch)
            if len(data) > MAX_BODY_BYTES:
                raise ServerError(f"{self.url}{path} sent more than {MAX_BODY_BYTES >> 20} MiB: not an answer "
                                  "this client asks for")
            return data
        except (OSError, http.client.HTTPException) as error:
            raise self._failure(f"{self.url}{path} did not finish its answer", error, cancel,
                                exchange.watch) from None
        finally:
            exchange.close()

    def _stream(self, path: str, body: dict, form: EventFormat, max_tokens: int, cancel: threading.Event | None,
                done: Callable[[str], bool] | None, time_budget_ms: float = 0) -> Streamed:
        """POST `body` and read its stream of events in `form` (Streamed: its text, its
        events, why it was stopped here, when each part came). It stops when `cancel` is set (at
        once for a CancelFlag, else at the next event), when `done` says the text is
        complete, with `time_budget_ms` at the first line end past it (llama.vim's
        t_max_predict_ms), and at an event past what `max_tokens` lets come (_Allowance:
        that event left out). Closing the stream is how the server learns the request is gone."""
        sent_s = time.monotonic()
        try:
            exchange = self._open("POST", path, body, cancel)
        except Cancelled:
            return Streamed("", [], StopReason.CANCELLED)
        text: list[str] = []
        events: list[dict] = []
        ended = None
        first_at = last_at = 0.0
        allowance = _Allowance(max_tokens)
        try:
            while line := exchange.response.readline(MAX_LINE_BYTES + 1):
                if cancel is not None and cancel.is_set():
                    break
                if not allowance.takes_line(len(line)):
                    raise ServerError(f"{self.url}{path} sent more than {allowance.most_bytes >> 20} MiB "
                                      f"for {max_tokens} tokens: not a stream this client asks for")
                event = self._event(line, path)
                if event is None:
                    continue
                if event is STREAM_END:
                    break
                if not allowance.takes_event(form.tokens(event)):
                    ended = StopReason.MAX_TOKENS
                    break
                events.append(event)
                text.append(piece := form.text(event))
                if piece:
                    last_at = time.monotonic()
                    first_at = first_at or last_at  # the budget leaves prompt evaluation out
                if done is not None and done("".join(text)):
                    ended = StopReason.DONE
                    break
                if time_budget_ms and "\n" in piece and time.monotonic() - first_at > time_budget_ms / 1000:
                    ended = StopReason.TIME
                    break
        except (OSError, http.client.HTTPException, ValueError) as error:
            if not (cancel is not None and cancel.is_set()):  # else it was closed by the cancel
                raise self._failure(f"{self.url}{path} broke off", error, cancel, exchange.watch) from None
        finally:
            exchange.close()
        if cancel is not None and cancel.is_set():
            ended = StopReason.CANCELLED
        elif exchange.watch.expired and ended is None:  # the deadline shut the socket: the read saw its end
            raise self._failure(f"{self.url}{path} broke off", TimeoutError(), cancel, exchange.watch)
        return Streamed("".join(text), events, ended, sent_s, first_at, last_at)

    def _event(self, line: bytes, path: str) -> dict | None:
        """A stream's line as its event: None for a line that is none (a blank, a comment),
        STREAM_END for OpenAI's end of a stream (`[DONE]`); ServerError for one that is
        not an event, or carries the server's error."""
        if len(line) > MAX_LINE_BYTES:
            raise ServerError(f"{self.url}{path} sent a line of more than {MAX_LINE_BYTES >> 20} MiB: "
                              "not an event of a stream")
        payload = line[6:].strip() if line.startswith(b"data: ") else b""
        if not payload:
            return None
        if payload == b"[DONE]":
            return STREAM_END
        event = json.loads(payload)
        if not isinstance(event, dict):
            raise ServerError(f"{self.url}{path} sent an event that is not a JSON object")
        if "error" in event:
            raise event_error(f"{self.url}{path}", event["error"])
        return event


def status_error(where: str, status: int, text: str) -> ServerError:
    """The error of an answer with HTTP `status` (its body `text`), a request's fault or
    the server's."""
    message = f"{where} answered HTTP {status}: {_error_text(text)}"
    if status not in REQUEST_FAULTS:
        return ServerError(message)
    return ServerError(message, request_fault=True, context_exceeded=_says_context_exceeded(text))


def event_error(where: str, error) -> ServerError:
    """The error a stream's event carries ({"code", "message", "type"} from llama-server)."""
    code = error.get("code") if isinstance(error, dict) else None
    text = json.dumps({"error": error})
    if isinstance(code, int) and code in REQUEST_FAULTS:
        return ServerError(f"{where}: {_error_text(text)}", request_fault=True,
                           context_exceeded=_says_context_exceeded(text))
    return ServerError(f"{where}: {_error_text(text)}")


def _says_context_exceeded(text: str) -> bool:
    """llama-server's `exceed_context_size_error` ("request (N tokens) exceeds the available
    context size (M tokens)", tools/server/server-context.cpp), or vLLM's and OpenAI's
    "This model's maximum context length is M tokens"."""
    return "exceed_context_size_error" in text or "maximum context length" in text


def completion_body(prompt: list[int], max_tokens: int, slot: int = -1, stop: list[str] | None = None,
                    temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, time_budget_ms: float = 0) -> dict:
    """llama-server's /completion request, streamed: the samplers the local engine runs,
    in its order (SAMPLERS)."""
    body = {"prompt": prompt, "n_predict": max_tokens, "stream": True, "cache_prompt": True, "id_slot": slot,
            "stop": stop or [], "temperature": temperature, "top_k": top_k, "top_p": top_p, "return_tokens": True,
            "samplers": SAMPLERS}
    if time_budget_ms:
        body["t_max_predict_ms"] = int(time_budget_ms)
    return body


class LlamaServerClient(HttpClient):
    """llama-server's own API."""

    def props(self) -> ServerProps:
        props = _shaped(self._json("GET", "/props"), dict, f"{self.url}/props")
        settings = _object(props.get("default_generation_settings"))
        speculative = {key: value for key, value in (_object(settings.get("params")) or settings).items()
                       if key.startswith("speculative")}
        slots, context = props.get("total_slots", 1), settings.get("n_ctx")  # n_ctx: per slot (-c / -np)
        if not (type(slots) is int and slots > 0 and type(context) is int and context > 0):
            raise ServerError(f"{self.url}/props says no slots or no context per slot "
                              "(default_generation_settings.n_ctx): not a llama-server this client can use")
        specials = tuple(text for text in (props.get("eos_token"), props.get("bos_token")) if isinstance(text, str)
                         and text)
        return ServerProps(str(props.get("model_path", "")), slots, context, speculative,
                           str(props.get("build_info") or ""), specials)

    def slots(self) -> list[dict]:
        return _shaped(self._json("GET", "/slots"), list, f"{self.url}/slots")

    def tokenize(self, text: str, parse_special: bool = True, cancel: threading.Event | None = None,
                 add_special: bool = False) -> list[int]:
        """The server's tokens of `text`; with `parse_special`, control-token text is
        parsed as control tokens, else as text; with `add_special`, the tokens its
        vocabulary puts around a prompt (BOS) too."""
        body = {"content": text, "parse_special": parse_special, "add_special": add_special}
        answer = self._json("POST", "/tokenize", body, cancel)
        tokens = _shaped(answer, dict, f"{self.url}/tokenize").get("tokens")
        if not isinstance(tokens, list) or not all(type(token) is int for token in tokens):
            raise ServerError(f"{self.url}/tokenize answered without a list of token ids")
        return tokens

    def detokenize(self, tokens: list[int], cancel: threading.Event | None = None) -> str:
        """The text of `tokens`, control tokens spelt out."""
        content = _shaped(self._json("POST", "/detokenize", {"tokens": tokens}, cancel), dict,
                          f"{self.url}/detokenize").get("content")
        if not isinstance(content, str):
            raise ServerError(f"{self.url}/detokenize answered without a text")
        return content

    def complete(self, prompt: list[int], max_tokens: int, slot: int = -1, stop: list[str] | None = None,
                 sampling: Sampling = GREEDY, time_budget_ms: float = 0, cancel: threading.Event | None = None,
                 done: Callable[[str], bool] | None = None) -> RemoteGeneration:
        """Generate after `prompt` (token ids) in `slot`, streamed (HttpClient._stream says
        when it stops early); the server keeps the time budget itself. `max_tokens` 0
        only evaluates the prompt into the slot's cache (llama-server makes one token)."""
        body = completion_body(prompt, max_tokens, slot, stop, sampling.temperature, sampling.top_k, sampling.top_p,
                               time_budget_ms)
        text, events, ended, *_ = self._stream("/completion", body, LLAMA_EVENTS, max_tokens, cancel, done)
        try:
            return self._generation(text, events, ended, max_tokens, slot)
        except (TypeError, ValueError, AttributeError):
            raise ServerError(f"{self.url}/completion sent events unlike llama-server's") from None

    def _generation(self, text: str, events: list[dict], ended: str | None, max_tokens: int,
                    slot: int) -> RemoteGeneration:
        tokens = [int(token) for event in events for token in event.get("tokens", [])]
        if ended:
            return RemoteGeneration(text, tokens, ended, 0, 0, slot=slot)
        last = events[-1] if events else {}
        if not last.get("stop"):
            raise ServerError(f"{self.url}/completion broke off before its last message: the server stopped?")
        stop_reason = STOP_TYPES.get(last.get("stop_type", ""), StopReason.END)
        if stop_reason == StopReason.MAX_TOKENS and len(tokens) < max_tokens:
            stop_reason = StopReason.TIME  # the only other limit: t_max_predict_ms
        timings = _object(last.get("timings"))  # its own tokens_cached counts the slot's tokens, the answer's too
        return RemoteGeneration(text, tokens, stop_reason, int(timings.get("cache_n", 0)),
                                int(timings.get("prompt_n", 0)), timings, int(last.get("id_slot", slot)))


def _content(event: dict) -> str:
    content = event.get("content", "")
    return content if isinstance(content, str) else ""


def _content_tokens(event: dict) -> int:
    """The tokens of a llama-server event: its `tokens` (return_tokens), and one at least
    where it has text."""
    tokens = event.get("tokens")
    return max(len(tokens) if isinstance(tokens, list) else 0, int(bool(_content(event))))


LLAMA_EVENTS = EventFormat(_content, _content_tokens)


def _object(value) -> dict:
    """`value` when it is a JSON object, else an empty one (a field a server left out or mangled)."""
    return value if isinstance(value, dict) else {}


def _shaped(answer, kind: type, where: str):
    """`answer` when it is a `kind` (a JSON object or array), else the ServerError saying so."""
    if not isinstance(answer, kind):
        raise ServerError(f"{where} answered a JSON {type(answer).__name__}, not the {kind.__name__} llama-server "
                          "sends")
    return answer


class OpenAIClient(HttpClient):
    """An OpenAI-compatible /v1/completions (vLLM, llama-server, others): the prompt as
    text, and no slots (vLLM's prefix cache, or llama-server's choice of the slot whose
    prompt is most alike, keeps each document's cache)."""

    def models(self) -> list[dict]:
        """/v1/models' entries: each has its `id` (vLLM's also `max_model_len`)."""
        models = _shaped(self._json("GET", "/v1/models"), dict, f"{self.url}/v1/models").get("data") or []
        if not models:
            raise ServerError(f"{self.url}/v1/models lists no model")
        if not isinstance(models, list) or not all(isinstance(entry, dict) and entry.get("id") for entry in models):
            raise ServerError(f"{self.url}/v1/models lists its models without their ids")
        return models

    def metrics(self) -> str:
        """/metrics, Prometheus' text (vLLM's: server_metrics.py reads it)."""
        return self._body("GET", "/metrics").decode("utf-8", "replace")

    def speculative_config(self) -> dict | None:
        """vLLM's speculative config as it runs ({} where it does not speculate), from its
        /server_info, which only a vLLM started with VLLM_SERVER_DEV_MODE=1 serves; None
        where there is none."""
        try:
            info = self._json("GET", "/server_info?config_format=json")
        except ServerError:
            return None
        config = info.get("vllm_config") if isinstance(info, dict) else None
        if not isinstance(config, dict):
            return None
        speculative = config.get("speculative_config")
        return speculative if isinstance(speculative, dict) else {}

    def complete(self, model: str, prompt: str, max_tokens: int, stop: list[str] | None = None,
                 sampling: Sampling = GREEDY, time_budget_ms: float = 0, cancel: threading.Event | None = None,
                 done: Callable[[str], bool] | None = None) -> RemoteGeneration:
        """Generate after `prompt`, streamed; the time budget is kept here, by closing the
        stream. The server's counts come from its usage (and llama-server's timings)."""
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                "stream_options": {"include_usage": True}, "temperature": sampling.temperature,
                "top_p": sampling.top_p}
        if stop:
            body["stop"] = stop[:OPENAI_STOPS]
        if sampling.top_k:  # not OpenAI's, but vLLM and llama-server take it
            body["top_k"] = sampling.top_k
        if sampling.temperature > 0:  # llama-server's, for the local engine's order (vLLM's own is that order already)
            body["samplers"] = SAMPLERS
        streamed = self._stream("/v1/completions", body, OPENAI_EVENTS, max_tokens, cancel, done, time_budget_ms)
        try:
            return self._generation(streamed)
        except (TypeError, ValueError, AttributeError):
            raise ServerError(f"{self.url}/v1/completions sent events unlike an OpenAI-compatible server's") from None

    def _generation(self, streamed: Streamed) -> RemoteGeneration:
        """The answer, with the server's counts: its usage (the event after the last
        choice), and llama-server's timings; a server that sends none (vLLM) is timed from
        the stream here. A stream stopped here has no usage, and no counts."""
        text, events, ended = streamed.text, streamed.events, streamed.ended
        if ended:
            return RemoteGeneration(text, [], ended, 0, 0)
        finish = next((choice["finish_reason"] for event in events for choice in event.get("choices", [])
                       if choice.get("finish_reason")), None)
        if finish is None:
            raise ServerError(f"{self.url}/v1/completions broke off before its last message: the server stopped?")
        usage = next((event["usage"] for event in reversed(events) if event.get("usage")), {})
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        evaluated = int(usage.get("prompt_tokens", 0)) - cached
        timings = next((event["timings"] for event in reversed(events) if event.get("timings")), None) or \
            streamed.timings(evaluated, int(usage.get("completion_tokens", 0)))
        stop_reason = StopReason.MAX_TOKENS if finish == "length" else StopReason.STOP
        return RemoteGeneration(text, [], stop_reason, cached, evaluated, timings)


def _choice_text(event: dict) -> str:
    choices = event.get("choices")
    return "".join(choice.get("text") or "" for choice in choices if isinstance(choice, dict)) \
        if isinstance(choices, list) else ""


def _choice_tokens(event: dict) -> int:
    """The tokens of an OpenAI event, which does not count them: one for each choice with
    text (a server's event holds a step's tokens, one at least)."""
    choices = event.get("choices")
    return sum(bool(choice.get("text")) for choice in choices if isinstance(choice, dict)) \
        if isinstance(choices, list) else 0


OPENAI_EVENTS = EventFormat(_choice_text, _choice_tokens)


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

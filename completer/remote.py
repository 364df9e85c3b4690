"""A llama-server as the other side of the engine: decoding, speculation (its own
--spec-type or draft model) and the KV cache (`cache_prompt`) live on the server; the
prompt, post-processing and everything else stay here.

    LlamaServerClient   /props (model, slots, context, speculative settings), /tokenize,
                        /detokenize, and a streamed /completion that a cancel flag closes:
                        llama-server stops generating once it finds the connection gone
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
    tokens_cached: int  # prompt tokens the server's slot already held
    tokens_evaluated: int
    timings: dict[str, float] = field(default_factory=dict)  # the server's own, ms and counts
    slot: int = -1


STOP_TYPES = {"eos": "end", "word": "stop", "limit": "max_tokens"}


class LlamaServerClient:
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
        """Generate after `prompt` (token ids) in `slot`, streamed. The stream is closed, and
        the server stops generating, when `cancel` is set (at once for a CancelFlag, else
        at the next token) or when `done` says the text so far is complete. With
        `time_budget_ms` the server stops at the first line end past it (llama.vim's
        t_max_predict_ms). `max_tokens` 0 only evaluates the prompt into the slot's cache."""
        body = {"prompt": prompt, "n_predict": max_tokens, "stream": True, "cache_prompt": True,
                "id_slot": slot, "stop": stop or [], "temperature": temperature, "top_k": top_k, "top_p": top_p,
                "return_tokens": True, "samplers": ["top_k", "top_p", "temperature"]}
        if time_budget_ms:
            body["t_max_predict_ms"] = int(time_budget_ms)
        if cancel is not None and cancel.is_set():
            return RemoteGeneration("", [], "cancelled", 0, 0, slot=slot)
        try:
            connection, response, unregister = self._open("POST", "/completion", body, cancel)
        except _Cancelled:
            return RemoteGeneration("", [], "cancelled", 0, 0, slot=slot)
        text, tokens, last = [], [], {}
        deadline = time.monotonic() + self.total_timeout_s
        try:
            for line in response:
                if cancel is not None and cancel.is_set():
                    break
                if time.monotonic() > deadline:
                    raise ServerError(f"{self.url} took longer than {self.total_timeout_s:.0f} s for one "
                                      "completion")
                if not line.startswith(b"data: "):
                    continue
                last = json.loads(line[6:])
                if "error" in last:
                    raise ServerError(f"{self.url}/completion: {_error_text(json.dumps(last))}")
                text.append(last.get("content", ""))
                tokens += last.get("tokens", [])
                if last.get("stop"):
                    break
                if done is not None and done("".join(text)):
                    return RemoteGeneration("".join(text), tokens, "done", 0, 0, slot=slot)
        except (OSError, http.client.HTTPException, ValueError) as error:
            if not (cancel is not None and cancel.is_set()):  # else it was closed by the cancel
                raise ServerError(f"{self.url}/completion broke off: {_reason(error)}") from None
        finally:
            unregister()
            connection.close()  # mid-stream: how llama-server learns the request is gone
        if cancel is not None and cancel.is_set():
            return RemoteGeneration("".join(text), tokens, "cancelled", 0, 0, slot=slot)
        if not last.get("stop"):
            raise ServerError(f"{self.url}/completion broke off before its last message: the server stopped?")
        stop_reason = STOP_TYPES.get(last.get("stop_type", ""), "end")
        if stop_reason == "max_tokens" and len(tokens) < max_tokens:
            stop_reason = "time"  # the only other limit: t_max_predict_ms
        return RemoteGeneration("".join(text), tokens, stop_reason, int(last.get("tokens_cached", 0)),
                                int(last.get("tokens_evaluated", 0)), last.get("timings", {}),
                                int(last.get("id_slot", slot)))


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

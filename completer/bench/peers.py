"""The peers `completer bench` runs beside its own modes, on the same target file,
prompts (as token ids), token budget and temperature.

llama-server (llama.cpp's own C++ loop, what llama.vim and llama.vscode run): one
process per configuration, started once per run on 127.0.0.1 and a free port, and
stopped at the end, on Ctrl-C and on errors (and by the kernel if the bench dies: it
is the server's parent-death signal). The prompt but its last token is evaluated
first by a request of its own (`cache_prompt`), as the bench's `Engine.prefill` does
for our modes; the timed request then evaluates that last token and generates. Its
time is the server's own `timings.prompt_ms + predicted_ms`: the same steps our modes
time. (`predicted_ms` alone leaves out the step that gave the first token, one step
in 24 at `--quick`.) The timed request's wall clock adds HTTP. A hole where the server
evaluated more than that last token is not timed (Untimed: the row says on how many,
and why), and the peer goes on with the next.

llama-cpp-python's LlamaPromptLookupDecoding: its Python prompt-lookup loop.
"""

import ctypes
import json
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from completer.bench import LLAMA_SERVER_PEERS
from completer.models.llama import LlamaModel

DRAFT = "{draft}"  # in a configuration's arguments: the draft model's path
# Per mode, llama-server's arguments beyond the model, context and threads.
#   draft      the preset's draft at llama-server's defaults (3 tokens a round)
#   draft-fim  the same draft with what llama-server's --fim-qwen-7b-spec preset sets
#              in this llama.cpp (batch and micro-batch 1024, cache reuse 256)
#   ngram-mod, ngram-simple  as llama.cpp's docs/speculative.md suggests
SERVER_ARGS = {
    "peer:llama-server": (),
    "peer:llama-server:draft": ("-md", DRAFT, "--spec-type", "draft-simple"),
    "peer:llama-server:draft-fim": ("-md", DRAFT, "--spec-type", "draft-simple", "-b", "1024", "-ub", "1024",
                                    "--cache-reuse", "256"),
    "peer:llama-server:ngram-mod": ("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "24",
                                    "--spec-ngram-mod-n-min", "48", "--spec-ngram-mod-n-max", "64"),
    "peer:llama-server:ngram-simple": ("--spec-type", "ngram-simple", "--spec-draft-n-max", "64"),
}
assert tuple(SERVER_ARGS) == LLAMA_SERVER_PEERS
START_TIMEOUT_S = 300  # loading a 14B target from a cold disk
REQUEST_TIMEOUT_S = 600


class PeerFailed(Exception):
    """The peer could not start or stopped answering; the message says why (its stderr's last line)."""


class Untimed(Exception):
    """The peer answered a hole, but its time there would not compare with our modes'
    (the message says why, in one line); it goes on with the next hole."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the bench's process dies (Linux's PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except OSError:  # not glibc: stopping at the end of the run still holds
        pass


@dataclass
class PeerResult:
    tokens: list[int]
    ms: float  # the prompt's last token and generation, as the server timed them
    wall_ms: float  # the timed request, HTTP included
    drafted: int
    accepted: int


class ServerPeer:
    """A running llama-server at `url`, asked as the bench asks its modes: the prompt
    but its last token evaluated outside the timing, then `max_tokens` tokens with
    every sampler off."""

    url: str

    def failure(self, what: str) -> PeerFailed:
        return PeerFailed(f"{self.url}: {what}")

    def _post(self, body: dict, path: str = "/completion") -> dict:
        request = urllib.request.Request(f"{self.url}{path}", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return json.load(response)
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError) as error:
            time.sleep(0.2)  # a server that died: let its exit status land
            raise self.failure(f"llama-server stopped answering ({error})") from None

    def generate(self, prompt: list[int], max_tokens: int, temperature: float, seed: int) -> PeerResult:
        self._post({"prompt": prompt[:-1], "n_predict": 0, "cache_prompt": True})  # outside the timing
        # Every other sampler off, as the bench's own sampling: top-k 0 and top-p 1 are
        # no filter; llama-server samples greedily at temperature 0.
        body = {"prompt": prompt, "n_predict": max_tokens, "temperature": temperature, "top_k": 0, "top_p": 1.0,
                "min_p": 0.0, "seed": seed, "cache_prompt": True, "return_tokens": True}
        started = time.perf_counter()
        answer = self._post(body)
        wall_ms = (time.perf_counter() - started) * 1000
        timings = answer.get("timings", {})
        evaluated = timings.get("prompt_n", 1)
        if evaluated != 1:  # its time would hold prompt evaluation that our modes' leaves out
            raise Untimed(f"llama-server evaluated {evaluated} prompt tokens in the timed request, not the last one "
                          "alone: it did not keep the prompt from the request before")
        ms = timings["prompt_ms"] + timings["predicted_ms"] if "predicted_ms" in timings else wall_ms
        return PeerResult(answer.get("tokens", []), ms, wall_ms, timings.get("draft_n", 0),
                          timings.get("draft_n_accepted", 0))

    def detokenize(self, tokens: list[int]) -> str:
        return self._post({"tokens": tokens}, "/detokenize")["content"]

    def close(self) -> None:
        """Nothing to stop: the server is someone else's."""


class LlamaServer(ServerPeer):
    """One llama-server configuration on the models the bench loaded, with their GPU
    layers, our thread count and context size, and one slot."""

    def __init__(self, binary: Path, mode: str, target: LlamaModel, draft: LlamaModel | None, context_tokens: int,
                 threads: int):
        drafts = DRAFT in SERVER_ARGS[mode]
        if drafts and draft is None:
            raise PeerFailed("the preset has no draft model")
        threads = str(threads)
        extra = [str(draft.path) if arg == DRAFT else arg for arg in SERVER_ARGS[mode]]
        drafting = ["-td", threads, "-tbd", threads, "-ngld", str(draft.gpu_layers)] if drafts else []
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Flash attention as the bench's own contexts have it: off on the CPU (it rounds a
        # batch differently from one token at a time), on with GPU layers.
        # A sliding-window model's window layers keep the whole context, as ours do
        # (llama.LlamaContext, swa_full). With window-sized ones llama-server keeps
        # checkpoints instead, and on a prompt of at most window + 1 tokens it went back
        # to the one 4 tokens before the primed prompt's end: the timed request evaluated
        # 6 tokens. (A model without a window: llama-server says so and ignores it.)
        gpu_layers = target.gpu_layers
        command = [str(binary), "-m", str(target.path), "-c", str(context_tokens), "-np", "1", "-t", threads,
                   "-tb", threads, "-ngl", str(gpu_layers), "-fa", "on" if gpu_layers > 0 else "off", "--swa-full",
                   "--host", "127.0.0.1", "--port", str(self.port), "--no-webui", *drafting, *extra]
        self.log = tempfile.TemporaryFile(mode="w+b")
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                        preexec_fn=_die_with_parent)
        try:
            self._wait_until_ready()
        except BaseException:  # not ready in time, or Ctrl-C: no server left behind
            self.close()
            raise

    def last_line(self) -> str:
        self.log.seek(0)
        lines = [line.strip() for line in self.log.read().decode(errors="replace").splitlines() if line.strip()]
        return lines[-1] if lines else "(no output)"

    def failure(self, what: str) -> PeerFailed:
        status = self.process.poll()
        exited = "" if status is None else (f" (exit {status})" if status >= 0 else
                                            f" (killed by {signal.Signals(-status).name})")
        return PeerFailed(f"{what}{exited}: {self.last_line()}")

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise self.failure("llama-server exited at start")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass  # still loading (503) or not listening yet
            time.sleep(0.2)
        raise self.failure(f"llama-server not ready after {START_TIMEOUT_S} s")

    def generate(self, prompt: list[int], max_tokens: int, temperature: float, seed: int) -> PeerResult:
        if self.process.poll() is not None:
            raise self.failure("llama-server is gone")
        return super().generate(prompt, max_tokens, temperature, seed)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class PromptLookupPeer:
    """llama-cpp-python's high-level generator with its prompt-lookup draft."""

    def __init__(self, path: str, n_ctx: int, threads: int, is_end: Callable[[int], bool]):
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.llm = Llama(path, n_ctx=n_ctx, n_threads=threads, verbose=False, flash_attn=False,
                         draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10), logits_all=True)
        self.is_end = is_end

    def generate(self, prompt: list[int], max_tokens: int, temperature: float, seed: int) -> PeerResult:
        self.llm.reset()
        self.llm.set_seed(seed)
        self.llm.eval(prompt)  # prefill outside the timing, as for our modes; generate() then reuses it
        started = time.perf_counter()
        tokens: list[int] = []
        sampling = {"temp": temperature, "top_k": 1} if temperature <= 0 else {"temp": temperature}
        for token in self.llm.generate(prompt, **sampling):
            if self.is_end(token) or len(tokens) >= max_tokens:
                break
            tokens.append(token)
        ms = (time.perf_counter() - started) * 1000
        return PeerResult(tokens, ms, ms, 0, 0)

    def close(self) -> None:
        self.llm.close()

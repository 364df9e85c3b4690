"""The llama-server client against a real llama-server (the one `completer peers
build` makes) on 127.0.0.1 with the smol target and two slots: streamed completions,
the prompt cache kept per slot, cancellation that stops the server's generation, and
faults as one clear error each."""

import json
import sys
import threading
import time
import urllib.request
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

from completer.config import Config, GenerationOptions, ModelOptions, PromptOptions
from completer.decoders.clients import (SAMPLERS, CancelFlag, LlamaServerClient, OpenAIClient, completion_body,
                                        sends_key_safely)
from completer.decoders.server import LlamaServerAPI, OpenAIAPI, ServerDecoder, SlotMap
from completer.editor.completer import Completer
from completer.engine.speculative import Sampling, probabilities
from completer.errors import ServerError
from completer.loading import server_api
from completer.models.llama import LlamaContext, LlamaModel
from completer.requests import CompletionRequest, Source
from completer.workspace import Workspace
from conftest import run_completer
from llama_server_process import LlamaServer, free_port

PROMPT = "def fibonacci(n):\n"


@pytest.fixture(scope="module")
def client(smol_llama_server) -> LlamaServerClient:
    return LlamaServerClient(smol_llama_server.url)


def test_the_server_says_its_model_slots_and_context(client, smol):
    props = client.props()
    assert props.model == str(smol.target) and props.slots == 2 and props.context_tokens == 2048
    assert props.speculative == {"speculative.types": "none"}


def test_doctor_checks_the_configured_server(client, smol):
    row = run_completer("doctor", "--decoder", "llama-server", "--server-url", client.url).stdout.splitlines()[0]
    assert row.startswith("server (llama-server)") and smol.target.name in row
    assert "2 slots of 2048 tokens" in row and "drafting no" in row and "backs off" not in row
    down = run_completer("doctor", "--decoder", "llama-server", "--server-url", f"http://127.0.0.1:{free_port()}")
    assert "cannot be used" in down.stdout and "refused" in down.stdout.lower()


def test_doctor_says_a_drafting_llama_server_takes_no_speculative_settings_per_request(drafting_llama_server):
    row = run_completer("doctor", "--decoder", "llama-server", "--server-url", drafting_llama_server.url)
    assert "drafting yes" in row.stdout and "backs off under load no: this llama-server takes no speculative " \
        "settings per request; the client backs off (lsp.back_off)" in row.stdout, row.stdout


def test_bench_measures_the_server_with_the_same_holes_and_table(client, tmp_path):
    repository = tmp_path / "repo"
    repository.mkdir()
    (repository / "stack.py").write_text("class Stack:\n    def __init__(self):\n        self.items = []\n\n"
                                         "    def push(self, item):\n        self.items.append(item)\n\n"
                                         "    def pop(self):\n        return self.items.pop()\n" * 3)
    report = tmp_path / "bench.json"
    result = run_completer("bench", str(repository), "--decoder", "llama-server", "--server-url", client.url,
                           "--baseline-url", client.url, "--n", "3", "--max-tokens", "8", "--report", str(report),
                           "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    rows = {row["mode"]: row for row in json.loads(result.stdout)}
    assert list(rows) == ["server", "target"] and rows["target"]["speedup_vs_target"] == pytest.approx(1.0)
    assert rows["server"]["identical_rate"] == 1.0 and rows["server"]["tokens_per_s"] > 0  # one server, twice
    assert rows["server"]["other_differences"] is None  # no logits here to judge a difference with
    records = json.loads(report.read_text())["records"]
    assert len(records) == 6 and all(len(r["tokens"]) == 8 and "shown" in r for r in records)
    alone = run_completer("bench", str(repository), "--decoder", "llama-server", "--server-url", client.url,
                          "--n", "2", "--max-tokens", "8", "--report", str(report), "--json", timeout=300)
    assert [row["speedup_vs_target"] for row in json.loads(alone.stdout)] == [None]  # nothing to compare with
    nowhere = run_completer("bench", str(repository), "--decoder", "llama-server")
    assert nowhere.returncode == 2 and "needs models.server_url" in nowhere.stderr


def test_a_prompt_family_the_servers_model_lacks_is_one_clear_error(client, smol):
    with pytest.raises(ServerError, match=f"models.prompt_family is qwen2.5-coder, but the server's model "
                                          f"{smol.target.name} has no FIM tokens"):
        LlamaServerAPI(client, "qwen2.5-coder").connect()
    assert LlamaServerAPI(client, "auto").connect().template is None  # smol has none: a prefix-only prompt


def test_the_key_comes_from_the_named_variable_and_only_goes_where_it_is_safe():
    options = ModelOptions(decoder="llama-server", server_url="http://127.0.0.1:8012", api_key_env="TEAM_KEY")
    with pytest.raises(ServerError, match="TEAM_KEY, which is not set"):
        server_api(options, {})
    assert server_api(options, {"TEAM_KEY": "s3cret"}).client.api_key == "s3cret"
    with pytest.raises(ServerError, match="only over https or to this machine"):
        server_api(replace(options, server_url="http://10.0.0.5:8012"), {"TEAM_KEY": "s3cret"})
    assert server_api(replace(options, server_url="https://gpu-box:8012"), {"TEAM_KEY": "s3cret"}).client.api_key


def test_a_greedy_completion_streams_the_targets_own_tokens(client, smol):
    """The server decodes what this machine's llama.cpp decodes: plain greedy steps."""
    prompt = client.tokenize(PROMPT)
    target = LlamaModel(smol.target, 0)
    assert prompt == target.tokenize(PROMPT)
    context = LlamaContext(target, n_ctx=512)
    local = [int(context.eval(prompt, 0, logits_at=[-1], argmax=True)[0])]
    for step in range(11):
        local.append(int(context.eval(local[-1:], len(prompt) + step, logits_at=[0], argmax=True)[0]))
    remote = client.complete(prompt, 12, slot=0)
    assert remote.tokens == local and remote.text == target.detokenize(local)
    assert remote.stop_reason == "max_tokens" and remote.slot == 0


def test_each_slot_keeps_its_documents_prompt_cache(client):
    a = client.tokenize("import os\n\n\ndef walk(top):\n    for root, dirs, files in os.walk(top):\n")
    b = client.tokenize("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n")
    client.complete(a, 4, slot=0)
    client.complete(b, 4, slot=1)
    again = client.complete(a + client.tokenize("        "), 4, slot=0)  # typed on in document a
    assert again.timings["cache_n"] >= len(a) - 1  # a's prompt was still in slot 0
    assert again.timings["prompt_n"] <= 3  # only what was typed was evaluated


def test_a_cancelled_stream_stops_the_servers_generation(client, smol_llama_server):
    prompt = client.tokenize(PROMPT)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    result = client.complete(prompt, 1500, slot=1, cancel=cancel)
    assert result.stop_reason == "cancelled"
    deadline = time.monotonic() + 10
    while (slot := client.slots()[1])["is_processing"]:
        assert time.monotonic() < deadline, "the server went on generating"
        time.sleep(0.1)
    held = slot["n_prompt_tokens"]  # the slot's tokens when it stopped: prompt and what was generated
    assert held < len(prompt) + 200  # 1500 were asked for
    # The server may write its log line after the slot is free (a clean-clone run read the
    # log ending mid-line): wait for it.
    while "cancel task" not in smol_llama_server.log.read_text():
        assert time.monotonic() < deadline, "the server logged no cancelled task"
        time.sleep(0.1)


def test_a_cancel_flag_closes_the_stream_at_once_even_while_the_server_evaluates_the_prompt(client):
    prompt = client.tokenize("".join(f"value_{i} = compute({i}, {i * 7})\n" for i in range(110)), False)
    cancel = CancelFlag()
    threading.Timer(0.3, cancel.set).start()  # evaluating ~1,700 tokens takes seconds here
    started = time.monotonic()
    result = client.complete(prompt, 50, slot=1, cancel=cancel)
    assert result.stop_reason == "cancelled" and not result.tokens
    assert time.monotonic() - started < 1.5


def test_a_stream_ends_when_the_text_is_done_or_the_time_budget_is_spent(client):
    prompt = client.tokenize(PROMPT)
    done = client.complete(prompt, 300, slot=0, done=lambda text: text.count("\n") >= 2)
    assert done.stop_reason == "done" and done.text.count("\n") == 2
    timed = client.complete(prompt, 300, slot=0, time_budget_ms=1)  # stops at the first line end past 1 ms
    assert timed.stop_reason == "time" and len(timed.tokens) < 300 and "\n" in timed.text


def test_no_tokens_asked_evaluates_the_prompt_into_the_slot(client):
    prompt = client.tokenize("import json\n\n\ndef load(path):\n    with open(path) as f:\n")
    warmed = client.complete(prompt, 0, slot=0)
    assert warmed.timings["prompt_n"] >= len(prompt) - 1
    after = client.complete(prompt, 4, slot=0)
    assert after.timings["prompt_n"] <= 1  # it was all there


def test_a_server_that_is_down_or_answers_an_error_is_one_clear_error(client):
    down = LlamaServerClient(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ServerError, match=r"did not answer /props: .*(refused|Connection)"):
        down.props()
    with pytest.raises(ServerError, match="answered HTTP 400"):
        client.complete([], 4)  # an empty prompt, refused by llama-server


class Silent(BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(3)

    def log_message(self, *args):
        pass


def test_a_slow_server_times_out_with_the_reason():
    httpd = HTTPServer(("127.0.0.1", 0), Silent)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = LlamaServerClient(f"http://127.0.0.1:{httpd.server_port}", total_timeout_s=0.5)
        with pytest.raises(ServerError, match="did not answer /props: timed out"):
            client.props()
    finally:
        httpd.shutdown()


def test_a_key_goes_only_over_https_or_to_this_machine():
    assert sends_key_safely("https://gpu-box:8080") and sends_key_safely("http://127.0.0.1:8080")
    assert sends_key_safely("http://localhost:8080") and sends_key_safely("http://[::1]:8080")
    assert not sends_key_safely("http://gpu-box:8080") and not sends_key_safely("http://10.0.0.5:8080")
    with pytest.raises(ServerError, match="an API key goes only over https or to this machine"):
        LlamaServerClient("http://gpu-box:8080", api_key="secret")
    with pytest.raises(ServerError, match="give it as http://host:port"):
        LlamaServerClient("gpu-box:8080")


def test_documents_keep_their_slot_and_a_new_one_takes_the_least_recently_used():
    slots = SlotMap(2)
    assert [slots.slot_for(d) for d in ("a", "b", "a")] == [0, 1, 0]
    assert slots.slot_for("c") == 1  # b was used least recently
    assert slots.slot_for("a") == 0
    slots.forget("a")
    assert slots.slot_for("d") == 0  # a's slot, freed
    assert slots.slot_for("c") == 1


def test_the_server_samples_from_the_distribution_the_local_engine_samples_from(client, smol):
    """One temperature and top-p, one distribution: llama-server runs the local engine's
    samplers in its order (top-p over the tempered distribution), and its own post-sampling
    probabilities of the first token equal speculative.probabilities' of the same logits."""
    prompt = client.tokenize(PROMPT)
    sampling = Sampling(temperature=1.5, top_k=0, top_p=0.5)
    body = {**completion_body(prompt, 1, 0, None, sampling.temperature, sampling.top_k, sampling.top_p),
            "stream": False, "n_probs": 500, "post_sampling_probs": True}
    request = urllib.request.Request(client.url + "/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    answer = json.loads(urllib.request.urlopen(request, timeout=60).read())
    served = {entry["id"]: entry["prob"] for entry in answer["completion_probabilities"][0]["top_probs"]}
    target = LlamaModel(smol.target, 0)
    local = probabilities(LlamaContext(target, n_ctx=512).eval(prompt, 0, logits_at=[-1]), sampling)[0]
    kept = {int(token): float(local[token]) for token in np.flatnonzero(local)}
    untempered_first = probabilities(LlamaContext(target, n_ctx=512).eval(prompt, 0, logits_at=[-1]),
                                     Sampling(1.0, 0, sampling.top_p))[0]
    assert np.count_nonzero(untempered_first) < len(kept) - 2  # the other order keeps fewer: the test can tell
    # The two builds' logits differ in their last digits: a token at the top-p edge may go either way.
    assert len(set(served) ^ set(kept)) <= 1, (sorted(served), sorted(kept))
    for token in set(served) & set(kept):
        assert served[token] == pytest.approx(kept[token], abs=0.01)
    assert body["samplers"] == SAMPLERS == ["temperature", "top_k", "top_p"]  # the order the request names


def test_a_prompt_the_server_finds_too_long_is_sent_again_shorter_and_the_server_stays_up(client):
    """The openai backend estimates a prompt's length at 3 characters a token; Chinese text
    takes more tokens than that, and the server refuses the prompt as past its context
    (HTTP 400, exceed_context_size_error): the request is made once more, half as long."""
    config = Config(generation=GenerationOptions(max_tokens=8, time_budget_ms=0))
    completer = Completer(ServerDecoder(OpenAIAPI(OpenAIClient(client.url))), config)
    text = "# " + "数据处理与分析" * 400 + "\n\n\ndef mean(values):\n    return "
    model = completer.decoder.connect()
    assert model.context_tokens == 2048  # llama-server's context per slot, from /v1/models
    assert completer.inline.prompt(CompletionRequest("a.py", "a.py", text, len(text)), model).length < 2048  # as estimated
    completion = completer.complete(CompletionRequest("a.py", "a.py", text, len(text)))
    assert completion.source == Source.MODEL and completion.result.tokens_evaluated > 0
    assert not completion.warning and not completer.stats().server_error


def test_the_ring_of_context_chunks_loses_nothing_to_requests_on_several_threads(tmp_path):
    """Requests for several documents run at once on worker threads, each adding the
    chunk of the document left to the ring and selecting from it."""
    config = Config(prompt=PromptOptions(chunks=1000))
    completer = Completer(ServerDecoder(OpenAIAPI(OpenAIClient("http://127.0.0.1:1"))), config, Workspace([tmp_path]))

    def requests(thread: int) -> None:
        for index in range(40):
            text = "".join(f"value_{thread}_{index}_{line} = {line}\n" for line in range(8))
            assert completer.ring.add(str(tmp_path / f"file_{thread}_{index}.py"), text, 0)
            completer.ring.select(10**6)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as the interpreter can
    try:
        threads = [threading.Thread(target=requests, args=(thread,)) for thread in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(completer.ring.chunks) == 8 * 40


def test_a_prompt_starts_with_bos_where_the_servers_vocabulary_asks(llama_server, client, gemma, tmp_path):
    """llama-server adds BOS to a text prompt only, and ours go as token ids: Gemma's
    vocabulary asks for BOS (without it Gemma 3 270M wrote quotes), smol's does not."""
    from completer.prompt import Segment

    text = "def area(width, height):\n    return"
    smol_backend = LlamaServerAPI(client)
    smol_backend.connect()
    assert smol_backend.bos == [] and smol_backend.encode([Segment(text)])[0] == client.tokenize(text, False)
    process = LlamaServer(llama_server, gemma, tmp_path / "server.log", slots=1).start()
    try:
        backend = LlamaServerAPI(LlamaServerClient(process.url))
        backend.connect()
        tokens, length = backend.encode([Segment(text)])
        local = LlamaModel(gemma, 0, vocab_only=True)
        assert tokens == [local.special.bos, *local.tokenize(text)] and length == len(tokens)
        assert backend.client.complete(tokens, 4, slot=0).text.startswith(" width")
    finally:
        process.stop()

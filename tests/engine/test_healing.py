"""Token healing at the cursor, on the real smol model and its vocabulary."""

import re
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from completer.engine.generation import Engine, GenerationRequest, generate
from completer.engine.healing import TokenPrefixes, heal
from completer.engine.speculative import Sampling
from completer.prompt import path_header

pytestmark = pytest.mark.slow  # minutes of real model passes: the full suite's, not the fast tier's

TEXTWRAP = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text()


@pytest.fixture(scope="module")
def prefixes(target):
    return TokenPrefixes(target, target.n_vocab)


@pytest.fixture
def engine(target):
    return Engine(target, None, n_ctx=2048, calibrate_s=0)


def cursor_in_word(line_number: int) -> tuple[list[int], str]:
    """A prompt ending 2 characters into the first long word of a textwrap.py line,
    and the rest of that word."""
    lines = TEXTWRAP.splitlines(keepends=True)
    line = lines[line_number]
    word = re.search(r"[A-Za-z_]{5,}", line)
    cut = word.start() + 2
    prefix = "".join(lines[max(0, line_number - 60) : line_number]) + line[:cut]
    return path_header("textwrap.py") + prefix, line[cut : word.end()]


def test_the_tokens_starting_with_some_bytes_are_exactly_those(target, prefixes):
    allowed = prefixes.starting_with(b"pri")
    assert len(allowed) > 3
    assert all(target.token_bytes(int(t)).startswith(b"pri") for t in allowed)
    everything = [t for t in range(target.n_vocab) if target.token_bytes(t).startswith(b"pri")]
    assert sorted(allowed.tolist()) == everything


def test_healing_backs_up_one_token_and_keeps_tokens_that_cannot_grow(target, prefixes):
    prompt = target.tokenize("x = self.cu")
    healed, healing = heal(prompt, target, prefixes)
    assert healed == prompt[:-1] and healing.text == target.token_bytes(prompt[-1]).decode()
    assert prompt[-1] in healing.allowed.tolist()
    assert heal([prompt[0]], target, prefixes) == ([prompt[0]], None)  # nothing before it to condition on


def test_healing_fixes_a_word_the_unhealed_prompt_gets_wrong(engine, target, prefixes):
    # textwrap.py line 223: `            cur_line = []`, cursor after "cu".
    text, rest_of_word = cursor_in_word(222)
    assert rest_of_word == "r_line"
    prompt = target.tokenize(text)
    unhealed = generate(engine, GenerationRequest(prompt=prompt, max_tokens=8, mode="target")).text
    assert not unhealed.startswith(rest_of_word)  # smol: "cu = len(chunks)"
    healed_prompt, healing = heal(prompt, target, prefixes)
    healed = generate(engine, GenerationRequest(prompt=healed_prompt, max_tokens=8, mode="target",
                                                healing=healing)).text
    assert healed.startswith(rest_of_word)


def test_healing_completes_words_far_more_often_over_many_cursors(engine, target, prefixes):
    plain = healed = 0
    for line_number in range(40, 300, 14):
        if not re.search(r"[A-Za-z_]{5,}", TEXTWRAP.splitlines()[line_number]):
            continue
        text, rest_of_word = cursor_in_word(line_number)
        prompt = target.tokenize(text)
        plain += generate(engine, GenerationRequest(prompt=prompt, max_tokens=6,
                                                    mode="target")).text.startswith(rest_of_word)
        healed_prompt, healing = heal(prompt, target, prefixes)
        healed += generate(engine, GenerationRequest(prompt=healed_prompt, max_tokens=6, mode="target",
                                                     healing=healing)).text.startswith(rest_of_word)
    assert healed >= plain + 3


def test_sampled_first_tokens_always_extend_what_was_typed(engine, target, prefixes):
    prompt = target.tokenize(path_header("a.py") + "import os\n\ndef main():\n    pa")
    healed_prompt, healing = heal(prompt, target, prefixes)
    for seed in range(12):
        result = generate(engine, GenerationRequest(prompt=healed_prompt, max_tokens=3, mode="auto", healing=healing,
                                                    sampling=Sampling(temperature=1.5, top_p=1.0, seed=seed)))
        assert target.token_bytes(result.tokens[0]).startswith(healing.text.encode())
        assert healing.text.endswith("pa") and np.isin(result.tokens[0], healing.allowed)
        assert target.detokenize(result.tokens) == healing.text + result.text


@pytest.mark.parametrize("heal_option", [True, False])
def test_the_heal_option_turns_healing_off_for_the_targets_own_distribution(target, heal_option):
    """`prompt.heal` off: the first token comes from the target at the cursor itself."""
    from dataclasses import replace

    from completer.config import Config, GenerationOptions, PromptOptions
    from completer.decoders.local import LocalDecoder
    from completer.editor.completer import Completer
    from completer.requests import CompletionRequest, cursor_offset

    line = TEXTWRAP.splitlines()[222]
    cut = line.index("cu") + 2
    # No time budget: on a loaded 2-core machine a second ran out after two tokens ("r_").
    config = replace(Config(), prompt=PromptOptions(heal=heal_option),
                     generation=GenerationOptions(max_tokens=8, time_budget_ms=0))
    completer = Completer(LocalDecoder(Engine(target, None, n_ctx=2048, calibrate_s=0)), config)
    completion = completer.complete(CompletionRequest("textwrap.py", "textwrap.py", TEXTWRAP,
                                                   cursor_offset(TEXTWRAP, 222, cut), "python"))
    first = target.token_bytes(completion.result.tokens[0])
    # Healed, the first token re-types the prompt's last one (" cu"), backed up over;
    # unhealed, it follows it.
    assert first.startswith(target.token_bytes(completion.prompt[-1])) == heal_option
    # Healed, the word goes on (`cur_line` on an AVX-512 CPU, `cur_len` on an AVX2 one).
    assert completion.text.startswith("r_") == heal_option

"""KV caches across keystrokes, edits and document switches, on the real smol pair.
Counted in tokens the models evaluate, which is what caching saves."""

import itertools
import sys
import sysconfig
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from completer.config import CacheOptions, Config, DraftingOptions, GenerationOptions, PromptOptions
from completer.decoders.local import LocalDecoder
from completer.editor.completer import Completer
from completer.editor.documents import INLINE
from completer.editor.inline import PromptContext, fit_prompt
from completer.editor.context import ChunkRing
from completer.editor.forward_cache import ForwardCache, Shown
from completer.editor.postprocess import CursorContext, postprocess
from completer.engine.generation import PROMPT_PIECE, Engine, GenerationRequest, generate
from completer.engine.kv import KVSequence
from completer.errors import PromptTooLong
from completer.models.llama import LlamaContext, LlamaModel
from completer.prompt import TEMPLATES, ContextFile, Segment, path_header, render
from completer.requests import CompletionRequest, Source, cursor_offset
from completer.workspace import Workspace

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def models(target, draft):
    """The session's target and draft."""
    return target, draft


@pytest.fixture
def engine(models):
    return Engine(*models, n_ctx=2048, calibrate_s=0.2)


def file_text(name: str, chars: int = 3000) -> str:
    return (STDLIB / name).read_text()[:chars]


def evaluated(engine: Engine) -> int:
    return engine.target.evaluated


def prepare(engine: Engine, text: str, path: str = "a.py") -> int:
    """Bring the target's cache up to this prompt; the tokens it had to evaluate."""
    before = evaluated(engine)
    prompt = engine.model.tokenize(path_header(path) + text)
    engine.target.sync(prompt[:-1])
    return evaluated(engine) - before


@pytest.mark.slow  # seconds of real model passes
def test_typing_at_the_cursor_evaluates_only_the_new_tokens(engine):
    text = file_text("textwrap.py")
    prepare(engine, text)
    typed = "    def wrap_all(self, paragraphs):\n        return [self.fill(p) for p in paragraphs]\n"
    costs = []
    for i in range(1, len(typed) + 1):
        costs.append(prepare(engine, text + typed[:i]))
        generate(engine, GenerationRequest(prompt=engine.model.tokenize(path_header("a.py") + text + typed[:i]),
                                           max_tokens=4, mode="auto"))
    # A typed character re-tokenizes at most the last word: a few tokens, never the file.
    assert max(costs) <= 4
    assert sum(costs) / len(typed) <= 3


@pytest.mark.slow  # over 4 s here: `make test-fast` keeps to 3 minutes
def test_an_edit_above_the_cursor_truncates_at_the_edit_and_completes_as_fresh(engine, models):
    text = file_text("textwrap.py")
    prompt_tokens = len(engine.model.tokenize(path_header("a.py") + text))
    prepare(engine, text)
    edit_at = text.index("\n", len(text) // 2)
    edited = text[:edit_at] + "\n# a new comment line" + text[edit_at:]
    cost = prepare(engine, edited)
    tail = len(engine.model.tokenize(path_header("a.py") + edited)) - len(
        engine.model.tokenize(path_header("a.py") + text[:edit_at]))
    assert cost <= tail + 3  # from the edit on, not from the top
    assert cost < prompt_tokens / 2
    prompt = engine.model.tokenize(path_header("a.py") + edited)
    cached = generate(engine, GenerationRequest(prompt=prompt, max_tokens=16, mode="target")).tokens
    fresh = generate(Engine(*models, n_ctx=2048, calibrate_s=0), GenerationRequest(prompt=prompt, max_tokens=16,
                                                                                   mode="target")).tokens
    assert cached == fresh


# A token's logits do not depend on how its context was split into batches (flash
# attention off, see test_llama.py); a KV cache that lost its content moves them by
# far more than 1.0.
LOGITS_TOLERANCE = 1e-3


def live_sequences(engine: Engine) -> list[KVSequence]:
    return [engine.target, engine.drafter.sequence]


def held(engine: Engine) -> list[list[int]]:
    """The tokens of each live sequence, for assert_caches_hold after a switch."""
    return [list(sequence.tokens) for sequence in live_sequences(engine)]


def assert_caches_hold(engine: Engine, expected: list[list[int]]) -> None:
    """Each live sequence holds exactly its expected tokens, as llama.cpp sees it too,
    and one more token gets the logits a fresh context gets after evaluating them."""
    for sequence, tokens in zip(live_sequences(engine), expected, strict=True):
        assert sequence.tokens == tokens
        assert sequence.context.length() == len(tokens)
        got = sequence.extend([198], logits_at=[0])[0]
        sequence.truncate(len(tokens))
        fresh = LlamaContext(sequence.context.model, n_ctx=2048)
        fresh.eval(tokens, 0)
        expected_logits = fresh.eval([198], len(tokens), logits_at=[0])[0]
        assert np.abs(got - expected_logits).max() <= LOGITS_TOLERANCE


@pytest.mark.slow  # seconds of real model passes
def test_switching_documents_keeps_both_caches(engine):
    engine.configure(engine.drafting, CacheOptions(budget_mb=512))
    a, b = file_text("textwrap.py"), file_text("shlex.py")
    engine.activate("a.py")
    assert prepare(engine, a) > 500
    engine.drafter.sequence.sync(engine.target.tokens)  # the draft's cache is switched too
    held_a = held(engine)
    engine.activate("b.py")
    assert prepare(engine, b, "b.py") > 500
    held_b = held(engine)
    engine.activate("a.py")
    assert_caches_hold(engine, held_a)
    assert prepare(engine, a + "x") <= 3  # restored: only the typed character
    engine.activate("b.py")
    assert_caches_hold(engine, held_b)
    assert prepare(engine, b, "b.py") == 0


@pytest.mark.slow  # seconds of real model passes
def test_the_memory_budget_evicts_the_least_recently_used_document(engine):
    a, b, c = file_text("textwrap.py"), file_text("shlex.py"), file_text("string.py")
    engine.configure(engine.drafting, CacheOptions(budget_mb=1024))
    for name, text in [("a.py", a), ("b.py", b)]:
        engine.activate(name)
        prepare(engine, text, name)
    one_document = engine.documents.saved_bytes
    assert one_document > 0
    engine.documents.budget_bytes = int(one_document * 1.5)  # room for one saved document, not two
    engine.activate("c.py")
    prepare(engine, c, "c.py")
    held_c = held(engine)
    engine.activate("a.py")  # saving c evicts a, the least recently used
    assert [name for name, document in engine.documents.all() if document.snapshots] == ["c.py"]
    assert_caches_hold(engine, [[], []])
    assert prepare(engine, a) > 500  # a is evaluated again from the start
    engine.activate("c.py")
    assert_caches_hold(engine, held_c)
    assert prepare(engine, c, "c.py") == 0


LINE = "DATA = os.path.join"
# What a completion may hold on one line, and what an editor auto-closes after the cursor.
ONE_LINE = st.text(st.characters(blacklist_categories=["Cs", "Cc", "Zl", "Zp"]), min_size=2, max_size=40)
CLOSERS = st.sampled_from([")", "]", "}", '")', "))", "):"])
MORE_LINES = st.one_of(st.just(""), st.text(max_size=40).map(lambda lines: "\n" + lines))


@given(ONE_LINE, CLOSERS, MORE_LINES, st.integers(1, 39))
@example("(os.path.dirname(__file__), os.path.sep", ")", "", 1)
@example("(values", ")", "\n    variance = (values - center) / len(values", 1)
def test_typing_then_an_auto_closed_bracket_never_repeats_what_follows_the_cursor(line, closer, more, typed):
    """The model wrote `line + closer` (and maybe more lines) at the end of LINE; the user
    types a start of it and the editor auto-closes with `closer` after the cursor. The
    answer is what post-processing shows there: one line, without the closer, so that
    the line the user gets is the one first shown."""
    forward = ForwardCache()
    generated = line + closer + more
    shown = postprocess(generated, CursorContext(LINE, "\n"))
    forward.remember(LINE + "\n", len(LINE), (Shown(generated, shown),))
    typed = min(typed, len(line) - 1)  # a start of the line, not all of it
    text = LINE + line[:typed] + closer + "\n"
    answer = forward.lookup(text, len(LINE) + typed, CursorContext(LINE + line[:typed], closer + "\n"))
    assert answer == ([line[typed:].rstrip()] if line[typed:].rstrip() else [])


def test_the_forward_cache_answers_only_for_the_text_it_was_shown_after():
    forward = ForwardCache()
    generated = "return [self.fill(text) for text in texts]\n\ndef wrap_all(texts):"
    forward.remember("x = 1\n    \n", len("x = 1\n    "),
                     (Shown(generated, postprocess(generated, CursorContext("    ", "\n"))),))

    def lookup(text_before: str) -> str | None:
        rests = forward.lookup(text_before + "\n", len(text_before), CursorContext(text_before.split("\n")[-1], "\n"))
        return rests[0] if rests else None

    assert lookup("x = 1\n    return [self") == ".fill(text) for text in texts]"
    assert lookup("x = 1\n    zz") is None  # typed something else: ask the model
    assert lookup("x = 1\n    return [self.fill(text) for text in texts]") is None  # fully typed
    assert lookup("x = 1\n   ") is None  # deleted a character
    assert forward.lookup("x = 1\n    \nreturn [self\n", len("x = 1\n    "),
                          CursorContext("    ", "\n")) == []  # a line pasted below: it was shown for other text


def test_typing_into_the_shown_completion_needs_no_model_call(engine):
    completer = Completer(LocalDecoder(engine), completer_config())
    text = file_text("textwrap.py") + "\n    def fill_all(self, texts):\n        return "
    shown = completer.complete(request_at_end("a.py", text)).text
    assert len(shown) > 3 and "\n" not in shown
    cache, evaluated_before = held(engine), evaluated(engine)
    for typed in range(1, len(shown)):
        again = completer.complete(request_at_end("a.py", text + shown[:typed]))
        assert (again.source, again.text) == (Source.FORWARD_CACHE, shown[typed:])
    # No model call: the caches hold what they held, and nothing was evaluated.
    assert evaluated(engine) == evaluated_before
    assert held(engine) == cache and engine.target.context.length() == len(cache[0])
    assert completer.counters.forward_cache_hits == completer.counters.requests - 1 == len(shown) - 1


@pytest.mark.slow  # seconds of real model passes
def test_candidates_are_distinct_and_typing_one_keeps_it(engine):
    """generation.candidates 3: the others are post-processed as the completion is, none
    empty or repeated; typing the start of another candidate answers with its rest from
    the forward cache, first, with no model call."""
    config = Config(generation=GenerationOptions(max_tokens=16, time_budget_ms=0, candidates=3))
    completer = Completer(LocalDecoder(engine), config)
    offered = 0
    for name in ["textwrap.py", "shlex.py", "string.py"]:
        text = file_text(name) + "\n    def fill_all(self, texts):\n        return "
        first = completer.complete(request_at_end(name, text))
        texts = [first.text, *first.alternatives]
        assert all(texts) and len(set(texts)) == len(texts) and len(texts) <= 3
        for other in first.alternatives:
            parted = next(i for i, (a, b) in enumerate(zip(other, first.text + "\0")) if a != b)
            if parted + 1 >= len(other):
                continue  # nothing would be left to show after typing through where it parts
            offered += 1
            evaluated_before = evaluated(engine)
            again = completer.complete(request_at_end(name, text + other[: parted + 1]))
            # Post-processed for the cursor as it is now: a line typed may show fewer lines after it.
            assert again.source == Source.FORWARD_CACHE and again.text and other[parted + 1:].startswith(again.text)
            assert evaluated(engine) == evaluated_before
    assert offered > 0  # smol's close runners-up make candidates in these holes


def spoil(snapshot, state: bytes | None = None) -> None:
    """Make each saved sequence of `snapshot` unrestorable: its state cut in half, or
    replaced by `state` (one from another model)."""
    snapshot.sequences = [saved._replace(state=state if state is not None else saved.state[: len(saved.state) // 2])
                          for saved in snapshot.sequences]


def draft_state(engine: Engine, text: str) -> bytes:
    """A draft model's saved state: a target context cannot take it (4 layers, not 30)."""
    draft = KVSequence(LlamaContext(engine.drafter.sequence.context.model, n_ctx=2048))
    draft.sync(engine.model.tokenize(text))
    return draft.save()[1]


@pytest.mark.slow  # seconds of real model passes
@pytest.mark.parametrize("damage", ["truncated", "another model's"])
def test_a_restore_that_fails_empties_the_caches_and_the_next_completion_is_fresh(engine, models, caplog, damage):
    completer = Completer(LocalDecoder(engine), Config(generation=GenerationOptions(max_tokens=16, draft_mode="target",
                                                                      time_budget_ms=0)))
    a, b = file_text("textwrap.py"), file_text("shlex.py")
    completer.complete(request_at_end("a.py", a))
    completer.complete(request_at_end("b.py", b))
    for sequence in live_sequences(engine):  # keep what one batch evaluated: a fresh batch gives its exact logits
        sequence.truncate(len(sequence.tokens) // 2)
    held_b = held(engine)
    spoil(engine.documents.find("a.py").snapshots[False], draft_state(engine, a) if damage == "another model's"
          else None)
    engine.activate("a.py")  # what the next request for a.py does first
    assert "evaluated again" in caplog.text
    assert_caches_hold(engine, [[], []])  # empty, and llama.cpp agrees: not N tokens over an empty KV
    request = request_at_end("a.py", a + "\n    def")
    cached = completer.complete(request)
    assert cached.evaluated_tokens == cached.prompt_tokens  # evaluated again from the start
    fresh = Completer(LocalDecoder(Engine(*models, n_ctx=2048, calibrate_s=0)), completer.config)
    assert cached.text == fresh.complete(request).text
    engine.activate("b.py")  # the other document's snapshot is intact
    assert_caches_hold(engine, held_b)


@pytest.mark.slow  # seconds of real model passes
def test_a_failed_restore_is_never_saved_as_a_good_snapshot(engine):
    engine.configure(engine.drafting, CacheOptions(budget_mb=512))
    engine.activate("a.py")
    prepare(engine, file_text("textwrap.py"))
    engine.activate("b.py")
    prepare(engine, file_text("shlex.py"), "b.py")
    held_b = held(engine)
    spoil(engine.documents.find("a.py").snapshots[False])
    engine.activate("a.py")  # fails: a's caches are left empty
    engine.activate("b.py")  # saves a as it is: empty, not its old token list over an empty state
    assert [saved.tokens for saved in engine.documents.find("a.py").snapshots[False].sequences] == [[], []]
    assert_caches_hold(engine, held_b)
    engine.target.context.truncate(0)  # b's KV lost under its token list
    engine.activate("a.py")
    assert [saved.tokens for saved in engine.documents.find("b.py").snapshots[False].sequences] == [[], []]
    assert_caches_hold(engine, [[], []])


def test_a_prompt_chunk_that_fails_midway_leaves_the_cache_as_before(models):
    target = models[0]
    sequence = KVSequence(LlamaContext(target, n_ctx=512, n_batch=16))
    tokens = target.tokenize(file_text("textwrap.py", 400))
    sequence.sync(tokens[:10])
    invalid = target.n_vocab + 7  # in the second chunk of 16: llama_decode refuses the chunk
    with pytest.raises(RuntimeError, match="llama_decode failed"):
        sequence.extend(tokens[10:40] + [invalid] + tokens[40:60])
    assert sequence.tokens == tokens[:10] and sequence.context.length() == 10
    sequence.sync(tokens[:60])
    got = sequence.extend([198], logits_at=[0])[0]
    fresh = LlamaContext(target, n_ctx=512, n_batch=16)
    fresh.eval(tokens[:60], 0)
    assert np.abs(got - fresh.eval([198], 60, logits_at=[0])[0]).max() <= LOGITS_TOLERANCE


def test_a_document_switched_away_from_before_any_completion_restores_empty(engine):
    engine.configure(engine.drafting, CacheOptions(budget_mb=64))
    engine.activate("empty.py")
    engine.activate("b.py")
    engine.activate("empty.py")
    assert engine.target.tokens == [] and engine.target.context.length() == 0


# The Completer: what the language server calls.

def completer_config(max_tokens: int = 16, **prompt) -> Config:
    return Config(generation=GenerationOptions(max_tokens=max_tokens, time_budget_ms=0),
                  prompt=PromptOptions(**prompt))


def request_at_end(document: str, text: str, path: str | None = None) -> CompletionRequest:
    return CompletionRequest(document, path or document, text, len(text), "python")


def test_each_keystroke_evaluates_only_the_new_tokens(engine):
    completer = Completer(LocalDecoder(engine), completer_config(max_tokens=8))
    text = file_text("textwrap.py")
    first = completer.complete(request_at_end("a.py", text))
    assert first.evaluated_tokens == first.prompt_tokens > 500
    typed = "    def wrap_all(self, paragraphs):\n        return [self.fill(p) for p in paragraphs]\n"
    costs = []
    for i in range(1, len(typed) + 1):
        completion = completer.complete(request_at_end("a.py", text + typed[:i]))
        if completion.source == Source.MODEL:
            costs.append(completion.evaluated_tokens)
    assert costs and max(costs) <= 4 and sum(costs) / len(costs) <= 3


@pytest.mark.slow  # seconds of real model passes
def test_accepting_a_whole_completion_and_going_on_reuses_the_cache(engine):
    completer = Completer(LocalDecoder(engine), completer_config())
    text = file_text("textwrap.py") + "\n    def fill_all(self, texts):\n        return "
    shown = completer.complete(request_at_end("a.py", text))
    accepted = completer.complete(request_at_end("a.py", text + shown.text + "\n"))
    assert accepted.source == Source.MODEL
    assert accepted.evaluated_tokens <= len(engine.model.tokenize(shown.text)) + 3


@pytest.mark.slow  # seconds of real model passes
def test_a_newer_request_cancels_the_running_one_and_the_cache_stays_consistent(engine, models):
    completer = Completer(LocalDecoder(engine), completer_config(max_tokens=400))
    text = file_text("textwrap.py")
    results = {}
    older = threading.Thread(target=lambda: results.setdefault("older", completer.complete(
        request_at_end("a.py", text + "\n# A long comment about"))))
    older.start()
    while not completer.documents.is_running("a.py", INLINE) or not engine.target.tokens:
        time.sleep(0.001)
    prefilled = len(engine.target.tokens)  # the prompt goes in as one evaluation
    while len(engine.target.tokens) <= prefilled + 1:  # into the generation, which could soon stop by itself
        time.sleep(0.001)
    newer = completer.complete(request_at_end("a.py", text + "\n    def "))
    older.join()
    assert results["older"].source == Source.SUPERSEDED and results["older"].text == ""
    assert newer.source == Source.MODEL and completer.counters.superseded == 1
    # The cache holds exactly its tokens: the next completion equals a fresh engine's
    # (plain decoding, short: longer texts may part at a near tie, see test_speculative_engine).
    completer.configure(replace(completer.config, generation=GenerationOptions(max_tokens=16, draft_mode="target",
                                                                               time_budget_ms=0)))
    next_request = request_at_end("a.py", text + "\n    def wrap")
    cached = completer.complete(next_request)
    fresh = Completer(LocalDecoder(Engine(*models, n_ctx=2048, calibrate_s=0)), completer.config)
    assert cached.text == fresh.complete(next_request).text
    assert engine.target.context.length() == len(engine.target.tokens)


@pytest.mark.slow  # seconds of real model passes
def test_n_gram_lookup_drafts_from_workspace_documents_switched_away_from(engine, tmp_path):
    """What followed a line in another open document is proposed when this one ends
    with that line; a document outside the workspace is never looked in, and a closed
    one no more."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    completer = Completer(LocalDecoder(engine), completer_config(max_tokens=4), Workspace([workspace]))
    text = file_text("textwrap.py")
    indexed = engine.model.tokenize(text)  # as the index holds the document
    middle = len(indexed) // 2
    tokens, then = engine.model.tokenize("x = 1\n") + indexed[middle - 20 : middle], indexed[middle : middle + 8]

    def proposed() -> list[int]:
        return engine.ngram.lookup(tokens, 8)[0]

    completer.complete(request_at_end("outside", text, str(tmp_path / "outside.py")))
    completer.complete(request_at_end("main", "x = 1\n", str(workspace / "main.py")))
    assert proposed() == []
    completer.complete(request_at_end("wrap", text, str(workspace / "textwrap.py")))
    completer.complete(request_at_end("main", "y = 2\n", str(workspace / "main.py")))  # not the forward cache's
    assert proposed() == then
    completer.close("wrap")
    assert proposed() == []


def test_drafting_options_change_what_is_drafted_without_a_reload(engine):
    """n-gram lookup drafts the rest of a line written before; once it asks for a longer
    match than the text has, the same engine drafts nothing."""
    line = "        total = total + values[index] * weights[index] - offsets[index]\n"
    text = "".join(f"def f{i}(values, weights, offsets):\n    total = 0\n    for index in range(3):\n{line}"
                   for i in range(4)) + "def g(values, weights, offsets):\n    total = 0\n    for index in range(3):\n" \
        + line[:line.index(" +")]  # the cursor after `total = total`, at a token's end
    # A probe every token: whatever the shared engine's tuner learnt before, a match is drafted.
    probing = DraftingOptions(probe_every=1, probe_max=1)
    config = Config(generation=GenerationOptions(max_tokens=16, time_budget_ms=0, draft_mode="ngram"),
                    prompt=PromptOptions(heal=False), drafting=probing)
    completer = Completer(LocalDecoder(engine), config)
    assert completer.complete(request_at_end("a.py", text)).result.stats.drafted > 0
    completer.configure(replace(config, drafting=replace(probing, ngram_min_match=60)))
    assert completer.complete(request_at_end("b.py", text)).result.stats.drafted == 0


@pytest.mark.slow  # seconds of real model passes
def test_top_k_and_top_p_reach_the_sampler(engine, models):
    """At temperature 1, keeping one token (top_k 1, or top_p 0) is greedy decoding."""
    request = request_at_end("a.py", file_text("textwrap.py") + "\n    def fill_all(self, texts):\n        return ")

    def completed(**generation) -> str:
        config = Config(generation=GenerationOptions(max_tokens=12, time_budget_ms=0, **generation),
                        prompt=PromptOptions(heal=False))
        return Completer(LocalDecoder(Engine(*models, n_ctx=2048, calibrate_s=0)), config).complete(request).text

    greedy = completed()
    assert completed(temperature=1.0, top_k=1) == greedy
    assert completed(temperature=1.0, top_p=0.0) == greedy


def test_a_fim_family_prompt_re_evaluates_the_new_tokens_and_the_bounded_suffix(smol_fim):
    fim_target = LlamaModel(smol_fim, n_gpu_layers=0)
    completer = Completer(LocalDecoder(Engine(fim_target, None, n_ctx=2048, calibrate_s=0)),
                          completer_config(max_tokens=8, suffix_lines=4))
    assert completer.decoder.model.template.family == "starcoder"
    text = file_text("textwrap.py")
    cut = text.index("\n", len(text) // 2) + 1
    before, after = text[:cut], text[cut:]
    suffix_lines = "".join(after.split("\n")[:4])
    special = fim_target.special

    def complete(typed: str):
        return completer.complete(CompletionRequest("a.py", "a.py", before + typed + after, len(before + typed),
                                                    "python"))

    complete("")
    held = completer.decoder.engine.target.tokens
    assert held[0] == special.fim_prefix and special.fim_suffix in held and special.fim_middle in held
    assert held.index(special.fim_suffix) < held.index(special.fim_middle)
    suffix_tokens = held.index(special.fim_middle) - held.index(special.fim_suffix)
    assert suffix_tokens >= len(fim_target.tokenize(suffix_lines)) // 2
    typed = "    def "
    costs = [c.evaluated_tokens for c in map(complete, (typed[:i] for i in range(1, len(typed) + 1)))
             if c.source == Source.MODEL]
    # Each keystroke: the typed characters, then the whole suffix section again (PSM).
    assert costs and all(suffix_tokens <= cost <= suffix_tokens + 4 for cost in costs)


def two_thousand_lines() -> str:
    """2,000 lines of real Python: standard-library modules one after another."""
    lines: list[str] = []
    for name in ("textwrap.py", "argparse.py", "configparser.py", "typing.py"):
        lines += (STDLIB / name).read_text().split("\n")
    return "\n".join(lines[:2000])


def big_document(engine: Engine) -> tuple[Completer, CompletionRequest, list[int]]:
    """The warming tests' case: a completer over `engine`, a request at line 1,500 of
    two_thousand_lines(), and its prompt's tokens."""
    completer = Completer(LocalDecoder(engine), completer_config(max_tokens=8))
    text = two_thousand_lines()
    request = CompletionRequest("big", "big.py", text, cursor_offset(text, 1500, 0), "python")
    return completer, request, completer.inline.prompt(request, completer.decoder.model).prompt


@pytest.mark.slow  # seconds of real model passes
def test_warming_evaluates_the_prompt_ahead_so_the_first_completion_evaluates_one_token(engine):
    completer, request, prompt = big_document(engine)
    assert completer.warm(request) == len(prompt) - 1  # all but the last token
    completion = completer.complete(request)
    assert completion.prompt == prompt and completion.evaluated_tokens == 1
    assert completer.stats().warmed_tokens == len(prompt) - 1
    cold = Completer(LocalDecoder(Engine(engine.model, None, n_ctx=2048, calibrate_s=0)), completer_config(max_tokens=8))
    assert cold.complete(request).evaluated_tokens == len(prompt)


@pytest.mark.slow  # seconds of real model passes
def test_a_request_during_warming_goes_first_and_one_for_another_document_ends_it(engine):
    completer, big, prompt = big_document(engine)
    warmed = {}
    warming = threading.Thread(target=lambda: warmed.setdefault("tokens", completer.warm(big)))
    warming.start()
    while len(engine.target.tokens) < PROMPT_PIECE:  # its first piece is in
        time.sleep(0.001)
    completion = completer.complete(request_at_end("small", "def mean(values):\n    return "))
    warming.join()
    assert completion.source == Source.MODEL and completion.text
    # The request took the engine between two pieces, and the caches: warming stopped there.
    assert 0 < warmed["tokens"] < len(prompt) - 1
    assert engine.holds("small")
    # What it did was kept: the big document's caches were saved with its pieces in them.
    assert completer.complete(big).evaluated_tokens == len(prompt) - warmed["tokens"]


class CountedEncodings:
    """fit_prompt's `encode`, a token a character, counting its calls. Past `limit` calls
    it raises: a loop that does not end fails the test instead of hanging it."""

    def __init__(self, limit: int):
        self.limit, self.calls = limit, 0

    def __call__(self, segments: list[Segment]) -> tuple[str, int]:
        self.calls += 1
        if self.calls > self.limit:
            raise AssertionError(f"fit_prompt encoded {self.calls} prompts and goes on")
        text = "".join(segment.text for segment in segments)
        return text, len(text)


@st.composite
def documents(draw) -> CompletionRequest:
    text = draw(st.text(st.sampled_from("ab (\n\t"), max_size=3000) | st.just("x" * 20_000 + "\n" * 300))
    return CompletionRequest("a.py", "/project/" + draw(st.sampled_from(["a.py", "d/" * 200 + "b.py"])), text,
                             draw(st.integers(0, len(text))))


ROOMS = st.integers(-2**31, -1) | st.integers(0, 100) | st.integers(0, 10**6) | st.just(10**18)


@given(documents(), ROOMS, st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 6),
       st.sampled_from([None, *TEMPLATES]))
def test_fitting_a_prompt_ends_for_any_room_and_any_text(request, room, prefix_lines, suffix_lines, chunks, template):
    """Whatever the room (a context smaller than the answer leaves less than none), the
    prompt fits in it or PromptTooLong says the smallest one does not, after a bounded
    number of encodings: each context file once (chunks, then definitions), then halving
    the lines, then the characters."""
    workspace = Workspace(["/project"])
    ring = ChunkRing(workspace, len, capacity=chunks)
    for i in range(chunks):
        ring.add(f"/project/other{i}.py", "".join(f"def f{i}_{n}(): pass\n" for n in range(20)), 0)
    definitions = tuple(ContextFile(f"lib{i}.py", f"def g{i}(x, *, key=None):\n    ...") for i in range(chunks))
    context = PromptContext(definitions, ring.select(10**6))
    options = PromptOptions(prefix_lines=prefix_lines, suffix_lines=suffix_lines)
    lines, chars = request.text.count("\n"), len(request.text)
    encode = CountedEncodings(len(context.files()) + lines.bit_length() + chars.bit_length() + 3)
    try:
        length = fit_prompt(request, options, template, room, workspace, context, encode).length
    except PromptTooLong as error:
        smallest = encode(render(template, workspace.relative(request.path), "", "", (), "project"))[1]
        assert smallest > room and error.room == room
    else:
        assert length <= room


@pytest.mark.slow  # seconds of real model passes
def test_completions_settings_and_statistics_from_many_threads_at_once_all_answer(engine, tmp_path):
    """The language server completes in worker threads while its event loop applies new
    settings and reads the statistics. New match lengths rebuild every n-gram index (of
    the documents switched away from too), and a small cache budget makes each switch
    evict saved caches: nothing may fail, and every request is answered. Long documents
    (indexed whole) with short prompts keep the rebuilds long and the requests quick, and
    threads switch every 10 us instead of every 5 ms, so that the races show."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    completer = Completer(LocalDecoder(engine), completer_config(max_tokens=4, prefix_lines=16, cross_file_tokens=0),
                          Workspace([workspace]))
    texts = [file_text(name, 20_000) for name in ("textwrap.py", "shlex.py", "string.py", "glob.py")]
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    deadline = time.monotonic() + 15
    answers: dict[str, list[str]] = {}
    failures: list[BaseException] = []

    def until_deadline(name: str, work) -> threading.Thread:
        def run() -> None:
            n = 0
            try:
                while time.monotonic() < deadline:
                    answers.setdefault(name, []).append(work(n))
                    n += 1
            except BaseException as error:
                failures.append(error)
        thread = threading.Thread(target=run, name=name)
        thread.start()
        return thread

    def completing(i: int):
        # A new line each time: the forward cache cannot answer, the engine must.
        return lambda n: completer.complete(request_at_end(f"doc{i}", texts[i] + f"\n# {n}\n",
                                                          str(workspace / f"doc{i}.py"))).source

    def configuring(n: int) -> str:
        completer.configure(replace(completer.config, drafting=DraftingOptions(ngram_min_match=3 + n % 2),
                                    cache=CacheOptions(budget_mb=(4, 64)[n % 2])))
        time.sleep(0.001)
        return "configured"

    def statistics(n: int) -> str:
        assert completer.stats().sessions <= len(texts)
        return "stats"

    threads = [until_deadline(f"complete {i}", completing(i)) for i in range(len(texts))]
    threads += [until_deadline("configure", configuring), until_deadline("stats", statistics)]
    for thread in threads:
        thread.join(120)
    sys.setswitchinterval(switch_interval)
    assert not any(thread.is_alive() for thread in threads), "a thread did not end"
    assert failures == []
    for i in range(len(texts)):
        assert answers[f"complete {i}"] and set(answers[f"complete {i}"]) <= {Source.MODEL, Source.SUPERSEDED}
    assert Source.MODEL in sum(answers.values(), []) and len(answers["configure"]) > 10
    assert completer.stats().requests == sum(len(answers[f"complete {i}"]) for i in range(len(texts)))


@pytest.mark.slow  # seconds of real model passes
def test_the_saved_caches_size_is_read_safely_while_documents_switch(engine):
    """completer/stats sums the saved caches from the event loop while a worker switches
    documents, which saves one, restores another and evicts over the budget."""
    engine.configure(engine.drafting, CacheOptions(budget_mb=1024))
    for i in range(8):
        engine.activate(f"doc{i}")
        prepare(engine, f"value_{i} = {i}\n" * 4)
    engine.documents.budget_bytes = engine.documents.saved_bytes * 3 // 4  # each switch now evicts too
    deadline = time.monotonic() + 5
    sums, failures = [], []

    def switching() -> None:
        for i in itertools.count():
            if time.monotonic() > deadline:
                return
            engine.activate(f"doc{i % 8}")
            prepare(engine, f"value_{i % 8} = {i}\n" * 4)

    def reading() -> None:
        try:
            while time.monotonic() < deadline:
                sums.append(engine.documents.saved_bytes)
        except RuntimeError as error:  # "dictionary changed size during iteration"
            failures.append(error)

    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=switching), threading.Thread(target=reading)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(switch_interval)
    assert failures == [] and sums and engine.documents.saved_bytes <= engine.documents.budget_bytes



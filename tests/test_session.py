"""KV caches across keystrokes, edits and document switches, on the real smol pair.
Counted in tokens the models evaluate, which is what caching saves."""

import sysconfig
import threading
from dataclasses import replace
import time
from pathlib import Path

import pytest

from completer.config import Config, GenerationOptions, PromptOptions
from completer.context import Workspace
from completer.engine import Engine, generate
from completer.prompt import path_header
from completer.session import Completer, CompletionRequest, DocumentCaches, PositionError
from models.backend import LlamaModel

STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def models(smol):
    return LlamaModel(smol.target, n_gpu_layers=0), LlamaModel(smol.draft, n_gpu_layers=0)


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


def test_typing_at_the_cursor_evaluates_only_the_new_tokens(engine):
    text = file_text("textwrap.py")
    prepare(engine, text)
    typed = "    def wrap_all(self, paragraphs):\n        return [self.fill(p) for p in paragraphs]\n"
    costs = []
    for i in range(1, len(typed) + 1):
        costs.append(prepare(engine, text + typed[:i]))
        generate(engine, engine.model.tokenize(path_header("a.py") + text + typed[:i]), 4, mode="auto")
    # A typed character re-tokenizes at most the last word: a few tokens, never the file.
    assert max(costs) <= 4
    assert sum(costs) / len(typed) <= 3


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
    cached = generate(engine, prompt, 16, mode="target").tokens
    fresh = generate(Engine(*models, n_ctx=2048, calibrate_s=0), prompt, 16, mode="target").tokens
    assert cached == fresh


def test_switching_documents_keeps_both_caches(engine):
    caches = DocumentCaches(engine, budget_mb=512)
    a, b = file_text("textwrap.py"), file_text("shlex.py")
    caches.activate("a.py")
    assert prepare(engine, a) > 500
    caches.activate("b.py")
    assert prepare(engine, b, "b.py") > 500
    caches.activate("a.py")
    assert prepare(engine, a + "x") <= 3  # restored: only the typed character
    caches.activate("b.py")
    assert prepare(engine, b, "b.py") == 0


def test_the_memory_budget_evicts_the_least_recently_used_document(engine):
    a, b, c = file_text("textwrap.py"), file_text("shlex.py"), file_text("string.py")
    caches = DocumentCaches(engine, budget_mb=1024)
    for name, text in [("a.py", a), ("b.py", b)]:
        caches.activate(name)
        prepare(engine, text, name)
    one_document = caches.saved_bytes if caches.saved else 0
    assert one_document > 0
    caches.budget_bytes = int(one_document * 1.5)  # room for one saved document, not two
    caches.activate("c.py")
    prepare(engine, c, "c.py")
    caches.activate("a.py")  # saving c evicts a, the least recently used
    assert list(caches.saved) == ["c.py"]
    assert prepare(engine, a) > 500  # a is evaluated again from the start
    caches.activate("c.py")
    assert prepare(engine, c, "c.py") == 0


def test_typing_into_the_shown_completion_needs_no_model_call(engine):
    from completer.session import ForwardCache

    text = file_text("textwrap.py")
    prompt = engine.model.tokenize(path_header("a.py") + text)
    shown = generate(engine, prompt, 12, mode="target").text
    assert len(shown) > 3
    forward = ForwardCache()
    forward.remember(text, shown)
    before = evaluated(engine)
    for typed in range(1, len(shown)):
        assert forward.lookup(text + shown[:typed]) == shown[typed:]
    assert evaluated(engine) == before  # no model call
    assert forward.lookup(text + "zz") is None
    assert forward.lookup(text + shown) is None  # fully typed: nothing left to show
    assert forward.lookup(text[:-1]) is None  # deleted a character: ask the model


def test_a_document_switched_away_from_before_any_completion_restores_empty(engine):
    caches = DocumentCaches(engine, budget_mb=64)
    caches.activate("empty.py")
    caches.activate("b.py")
    caches.activate("empty.py")
    assert engine.target.tokens == [] and engine.target.context.seq_length() == 0


# The Completer: what the language server calls.

def completer_config(max_tokens: int = 16, **prompt) -> Config:
    return Config(generation=GenerationOptions(max_tokens=max_tokens, time_budget_ms=0),
                  prompt=PromptOptions(**prompt))


def request_at_end(document: str, text: str, path: str | None = None) -> CompletionRequest:
    lines = text.split("\n")
    return CompletionRequest(document, path or document, text, len(lines) - 1, len(lines[-1]), "python")


def test_each_keystroke_evaluates_only_the_new_tokens(engine):
    completer = Completer(engine, completer_config(max_tokens=8))
    text = file_text("textwrap.py")
    first = completer.complete(request_at_end("a.py", text))
    assert first.evaluated_tokens == first.prompt_tokens > 500
    typed = "    def wrap_all(self, paragraphs):\n        return [self.fill(p) for p in paragraphs]\n"
    costs = []
    for i in range(1, len(typed) + 1):
        completion = completer.complete(request_at_end("a.py", text + typed[:i]))
        if completion.source == "model":
            costs.append(completion.evaluated_tokens)
    assert costs and max(costs) <= 4 and sum(costs) / len(costs) <= 3


def test_a_completion_shown_then_typed_needs_no_model_call(engine):
    completer = Completer(engine, completer_config())
    text = file_text("textwrap.py") + "\n    def fill_all(self, texts):\n        return "
    shown = completer.complete(request_at_end("a.py", text))
    assert shown.source == "model" and len(shown.text) > 2
    before = evaluated(engine)
    again = completer.complete(request_at_end("a.py", text + shown.text[:2]))
    assert (again.source, again.text) == ("forward cache", shown.text[2:])
    assert evaluated(engine) == before
    assert completer.counters.forward_cache_hits == 1


def test_accepting_a_whole_completion_and_going_on_reuses_the_cache(engine):
    completer = Completer(engine, completer_config())
    text = file_text("textwrap.py") + "\n    def fill_all(self, texts):\n        return "
    shown = completer.complete(request_at_end("a.py", text))
    accepted = completer.complete(request_at_end("a.py", text + shown.text + "\n"))
    assert accepted.source == "model"
    assert accepted.evaluated_tokens <= len(engine.model.tokenize(shown.text)) + 3


def test_a_newer_request_cancels_the_running_one_and_the_cache_stays_consistent(engine, models):
    completer = Completer(engine, completer_config(max_tokens=400))
    text = file_text("textwrap.py")
    results = {}
    older = threading.Thread(target=lambda: results.setdefault("older", completer.complete(
        request_at_end("a.py", text + "\n# A long comment about"))))
    older.start()
    while "a.py" not in completer._running or not engine.target.tokens:
        time.sleep(0.01)
    time.sleep(0.3)  # into the generation
    newer = completer.complete(request_at_end("a.py", text + "\n    def "))
    older.join()
    assert results["older"].source == "superseded" and results["older"].text == ""
    assert newer.source == "model" and completer.counters.superseded == 1
    # The cache holds exactly its tokens: the next completion equals a fresh engine's
    # (plain decoding, short: longer texts may part at a near tie, see test_speculative_engine).
    completer.configure(replace(completer.config, generation=GenerationOptions(max_tokens=16, draft_mode="target",
                                                                               time_budget_ms=0)))
    next_request = request_at_end("a.py", text + "\n    def wrap")
    cached = completer.complete(next_request)
    fresh = Completer(Engine(*models, n_ctx=2048, calibrate_s=0), completer.config)
    assert cached.text == fresh.complete(next_request).text
    assert engine.target.context.seq_length() == len(engine.target.tokens)


def test_other_workspace_files_become_context_and_outside_files_never_do(engine, tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    outside = tmp_path / "secrets.py"
    completer = Completer(engine, completer_config(max_tokens=4, chunk_lines=16), Workspace([workspace]))
    helper = "".join(f"def helper_{i}(value):\n    return value * {i}\n" for i in range(8))
    secret = "".join(f"API_TOKEN_{i} = 'do-not-send-{i}'\n" for i in range(8))
    completer.complete(request_at_end("helpers", helper, str(workspace / "helpers.py")))
    completer.complete(request_at_end("secrets", secret, str(outside)))
    completer.complete(request_at_end("main", "import helpers\n\nx = ", str(workspace / "main.py")))
    assert [chunk.path for chunk in completer.ring.chunks] == ["helpers.py"]
    prompt_text = engine.model.detokenize(engine.target.tokens)
    assert "def helper_7(value)" in prompt_text and "# helpers.py" in prompt_text
    assert "do-not-send" not in prompt_text and "# main.py" in prompt_text


def test_a_cursor_outside_the_document_is_a_clear_error(engine):
    completer = Completer(engine, completer_config())
    with pytest.raises(PositionError, match="line 5 is outside the document"):
        completer.complete(CompletionRequest("a.py", "a.py", "x = 1\n", 5, 0))
    with pytest.raises(PositionError, match="character 9 is outside line 0"):
        completer.complete(CompletionRequest("a.py", "a.py", "x = 1\n", 0, 9))



def test_a_fim_family_prompt_re_evaluates_the_new_tokens_and_the_bounded_suffix(smol_fim):
    fim_target = LlamaModel(smol_fim, n_gpu_layers=0)
    completer = Completer(Engine(fim_target, None, n_ctx=2048, calibrate_s=0),
                          completer_config(max_tokens=8, suffix_lines=4))
    assert completer.template.family == "starcoder"
    text = file_text("textwrap.py")
    cut = text.index("\n", len(text) // 2) + 1
    before, after = text[:cut], text[cut:]
    suffix_lines = "".join(after.split("\n")[:4])
    special = fim_target.special

    def complete(typed: str):
        lines = (before + typed).split("\n")
        return completer.complete(CompletionRequest("a.py", "a.py", before + typed + after, len(lines) - 1,
                                                    len(lines[-1]), "python"))

    complete("")
    held = completer.engine.target.tokens
    assert held[0] == special.fim_prefix and special.fim_suffix in held and special.fim_middle in held
    assert held.index(special.fim_suffix) < held.index(special.fim_middle)
    suffix_tokens = held.index(special.fim_middle) - held.index(special.fim_suffix)
    assert suffix_tokens >= len(fim_target.tokenize(suffix_lines)) // 2
    typed = "    def "
    costs = [c.evaluated_tokens for c in map(complete, (typed[:i] for i in range(1, len(typed) + 1)))
             if c.source == "model"]
    # Each keystroke: the typed characters, then the whole suffix section again (PSM).
    assert costs and all(suffix_tokens <= cost <= suffix_tokens + 4 for cost in costs)

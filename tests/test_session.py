"""KV caches across keystrokes, edits and document switches, on the real smol pair.
Counted in tokens the models evaluate, which is what caching saves."""

import sysconfig
from pathlib import Path

import pytest

from completer.engine import Engine, generate
from completer.prompt import path_header
from completer.session import DocumentCaches
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

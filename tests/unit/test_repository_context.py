"""The definitions a completion calls, in its prompt: what the Completer takes from the
definitions index for a request (completer/editor/repository_context.py), how it gives way
in a prompt that does not fit, and what context.exclude keeps out. No model: the fake
decoder's prompts are their text."""

from pathlib import Path

import pytest

from completer.config import Config, ContextOptions
from completer.editor import repository_context
from completer.editor.completer import Completer
from completer.editor.inline import PromptContext
from completer.editor.repository_context import RepositoryContext
from completer.prompt import ContextFile
from completer.requests import CompletionRequest, Source
from completer.workspace import Workspace
from fake_decoder import FakeDecoder
from shop_repository import CALL, TRANSPORT, write_shop

SECRET = '''"""The shop's credentials for the warehouse API: rotated monthly by the operations team,
never logged, never sent anywhere but the warehouse's own host over HTTPS."""

API_TOKEN = "sk-live-0123456789abcdef"


def rotate_token() -> str:
    """The token for next month: the warehouse accepts both during the first week."""
    return API_TOKEN[::-1]
'''
ORDERS = ("from shop.client import connect\nfrom shop.secrets import API_TOKEN, rotate_token\n\n\n"
          "def latest_orders(host: str) -> bytes:\n    headers = {\"authorization\": API_TOKEN}\n" + CALL)


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A repository whose orders.py calls a transport two imports away and imports a secret."""
    write_shop(tmp_path, ORDERS, **{"secrets.py": SECRET})
    (tmp_path / ".env").write_text('WAREHOUSE_PASSWORD="hunter2-0123456789"\nexport WAREHOUSE_PASSWORD\nexport OTHER=1\n')
    return tmp_path


def orders_request(shop: Path, typed: str = "") -> CompletionRequest:
    text = ORDERS + typed
    return CompletionRequest("orders", str(shop / "shop" / "orders.py"), text, len(text), "python")


def built(shop: Path, options: ContextOptions = ContextOptions()) -> RepositoryContext:
    context = RepositoryContext(Workspace([shop]))
    context.configure(options)
    context.build()
    return context


def test_the_prompt_shows_the_method_the_cursor_calls_from_two_imports_away_once(shop):
    """connect() is imported; Transport.fetch is found by the name written after a "."
    The class Transport is not named at the cursor: its whole text is not taken."""
    snippets = built(shop).select(orders_request(shop), lambda text: len(text) // 3)
    shown = "\n".join(snippet.text for snippet in snippets)
    assert "max_staleness_s: int = 30" in shown
    assert shown.count("def fetch(") == 1
    assert [snippet.reason for snippet in snippets] == ["imported", "same name"]


def test_a_method_shown_whole_in_its_class_is_not_shown_again(shop):
    """A snippet of the class (imported by name) holds its method: the method's own,
    dedented snippet is left out though its indentation differs."""
    text = "from shop.transport import Transport\n\n\ndef run(t: Transport):\n    t.fetch("
    request = CompletionRequest("run", str(shop / "shop" / "run.py"), text, len(text), "python")
    snippets = built(shop).select(request, lambda text: len(text) // 4)  # room for both
    assert [snippet.definition.name for snippet in snippets] == ["Transport"]


def test_typing_within_a_line_keeps_the_block_and_parses_the_file_once(shop, monkeypatch):
    """Each keystroke of `max_staleness_s=5)` asks for the definitions again: the block
    the prompt shows stays the same (its KV cache holds), and the document is parsed for
    its imports once, not once a keystroke."""
    parsed = []
    real_extract = repository_context.extract
    monkeypatch.setattr(repository_context, "extract", lambda *args: parsed.append(1) or real_extract(*args))
    context = built(shop)
    typed = "max_staleness_s=5)"
    blocks = {tuple(snippet.text for snippet in context.select(orders_request(shop, typed[:end]), len))
              for end in range(len(typed) + 1)}
    assert len(blocks) == 1
    assert len(parsed) == 1


def test_a_rename_saved_in_another_file_is_what_the_prompt_shows(shop):
    context = built(shop)
    renamed = TRANSPORT.replace("max_staleness_s", "freshness_budget_s")
    context.file_changed(str(shop / "shop" / "transport.py"), renamed)
    shown = "\n".join(snippet.text for snippet in context.select(orders_request(shop), len))
    assert "freshness_budget_s" in shown and "max_staleness_s" not in shown


def test_context_gives_way_chunks_oldest_first_then_the_last_definitions():
    definitions = (ContextFile("a.py", "A"), ContextFile("b.py", "B"))
    chunks = (ContextFile("old.py", "O"), ContextFile("new.py", "N"))
    sizes = []
    context = PromptContext(definitions, chunks)
    while context is not None:
        sizes.append([file.path for file in context.files()])
        context = context.smaller()
    assert sizes == [["a.py", "b.py", "old.py", "new.py"], ["a.py", "b.py", "new.py"], ["a.py", "b.py"], ["a.py"], []]


def secret_free(prompt: str) -> bool:
    return "sk-live" not in prompt and "hunter2" not in prompt


def test_an_excluded_file_reaches_no_prompt_whatever_the_cursor_calls(shop):
    """orders.py imports API_TOKEN and rotate_token from shop/secrets.py (secrets.* is
    excluded by default): no snippet of it, at any cursor; and .env, open in the editor
    and then left, never becomes an open file's chunk."""
    decoder = FakeDecoder()
    completer = Completer(decoder, Config(), Workspace([shop]))
    completer.repository.build()
    env = (shop / ".env").read_text()
    assert completer.complete(CompletionRequest(".env", str(shop / ".env"), env, 10)).source == Source.EXCLUDED
    for typed in ["", "API_TOKEN", "rotate_token(", "headers[API_TOKEN"]:
        completer.complete(orders_request(shop, typed))
    prompts = [decode.prompt for decode in decoder.decodes]
    assert len(prompts) == 4 and all(secret_free(prompt) for prompt in prompts)
    assert "max_staleness_s" in prompts[0]  # the definitions are there: only the secret is not


def test_a_request_in_an_excluded_file_never_reaches_the_decoder(shop):
    decoder = FakeDecoder()
    completer = Completer(decoder, Config(), Workspace([shop]))
    secret = shop / "shop" / "secrets.py"
    request = CompletionRequest("secrets", str(secret), SECRET, len(SECRET) - 1, "python")
    assert completer.complete(request).source == Source.EXCLUDED
    assert completer.next_edit(request).source == Source.EXCLUDED
    assert completer.warm(request) == 0
    assert completer.prefetch(request, 0) is None
    assert decoder.decodes == []


def test_a_file_tree_sitter_cannot_read_gives_no_definitions_and_no_error(shop):
    """A Python file that is mostly not Python, a binary one and a language without a
    grammar: the index holds nothing of them, and a request in them is answered."""
    (shop / "shop" / "broken.py").write_text("def connect(host:\n" + ")(" * 2000 + "\n")
    (shop / "shop" / "blob.py").write_bytes(b"def connect():\0\0\0" * 100)
    (shop / "notes.fancylang").write_text("def connect = 1\n")
    decoder = FakeDecoder({"": "pass"})
    completer = Completer(decoder, Config(), Workspace([shop]))
    completer.repository.build()
    assert [d.path for d in completer.repository.index.lookup("connect")] == [str(shop / "shop" / "client.py")]
    broken = (shop / "shop" / "broken.py").read_text()
    completion = completer.complete(CompletionRequest("broken", str(shop / "shop" / "broken.py"), broken, 10, "python"))
    assert completion.source == Source.MODEL and completion.warning == ""


def test_a_build_within_a_time_says_whether_it_read_every_file(shop):
    """`complete` reads the definitions for a bounded time on a large repository, and says
    when it could not read them all."""
    cut = RepositoryContext(Workspace([shop]))
    assert cut.build(within_s=0.0) is False and cut.index.stats().files <= 1
    whole = RepositoryContext(Workspace([shop]))
    assert whole.build(within_s=60.0) is True and whole.index.stats().files == 3  # secrets.py excluded

"""The definitions a completion calls, in its prompt, on the real smol pair: a keyword
argument defined two imports away is written with them and not without, and a secret
the code at the cursor imports never reaches the prompt the model reads."""

from dataclasses import replace
from pathlib import Path

import pytest

from completer.config import Config, ContextOptions, GenerationOptions
from completer.decoders.local import LocalDecoder
from completer.editor.completer import Completer
from completer.engine.generation import Engine
from completer.requests import CompletionRequest, Source
from completer.workspace import Workspace
from shop_repository import CALL, write_shop

SECRETS = '''"""The warehouse API's credentials."""

WAREHOUSE_TOKEN = "sk-live-5f1e9c0a77d2"


def token_header() -> dict:
    return {"authorization": WAREHOUSE_TOKEN}
'''
ORDERS = ("from shop.client import connect\nfrom shop.secrets import WAREHOUSE_TOKEN, token_header\n\n\n"
          "def latest_orders(host: str) -> bytes:\n" + CALL)


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return write_shop(tmp_path, ORDERS, **{"secrets.py": SECRETS})


@pytest.fixture(scope="module")
def engine(target, draft):
    return Engine(target, draft, n_ctx=2048, calibrate_s=0.2)


def completer_over(engine: Engine, shop: Path, definitions_tokens: int) -> Completer:
    config = Config(generation=GenerationOptions(max_tokens=12, time_budget_ms=0, temperature=0.0),
                    context=ContextOptions(definitions_tokens=definitions_tokens))
    completer = Completer(LocalDecoder(engine), config, Workspace([shop]))
    completer.repository.build()
    return completer


def orders_request(shop: Path) -> CompletionRequest:
    return CompletionRequest("orders", str(shop / "shop" / "orders.py"), ORDERS, len(ORDERS), "python")


@pytest.mark.slow  # real decoding, twice
def test_a_keyword_argument_two_imports_away_is_written_with_definitions_and_not_without(engine, shop):
    """At `transport.fetch("/orders", ` smol writes `max_staleness_s` (a keyword only
    transport.py defines) when the prompt shows fetch's signature, and something else
    when it does not (definitions_tokens 0): the same model, the same file."""
    with_definitions = completer_over(engine, shop, 512).complete(orders_request(shop))
    assert with_definitions.source == Source.MODEL
    assert [file.path for file in with_definitions.context] == ["shop/client.py", "shop/transport.py"]
    assert "max_staleness_s" in with_definitions.text, with_definitions.text
    without = completer_over(engine, shop, 0).complete(orders_request(shop))
    assert without.context == ()
    assert "max_staleness_s" not in without.text, without.text


@pytest.mark.slow  # real decoding, twice
def test_a_secret_the_code_at_the_cursor_imports_never_reaches_the_prompt(engine, shop):
    """orders.py imports WAREHOUSE_TOKEN and token_header from shop/secrets.py, which
    context.exclude's default names: at a cursor after either name, the prompt the model
    read holds none of secrets.py, while the other definitions are there."""
    completer = completer_over(engine, shop, 512)
    for typed in ["WAREHOUSE_TOKEN, ", "headers=token_header("]:
        text = ORDERS + typed
        completion = completer.complete(replace(orders_request(shop), text=text, cursor=len(text)))
        prompt = completer.prompt_text(completion.prompt)
        assert "sk-live" not in prompt and "def token_header" not in prompt
        assert "max_staleness_s" in prompt
        assert all("secrets" not in file.path for file in completion.context)

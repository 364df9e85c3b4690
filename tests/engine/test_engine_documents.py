"""What the engine keeps of a document lives in one place (engine/documents.py): closing
it is one removal, and a walk of everything the engine holds finds nothing of it after,
whatever was in flight when it closed."""

import sysconfig
import threading
import weakref
from pathlib import Path

import numpy as np

from completer.decoders.local import LocalDecoder
from completer.decoders.decoder import Closed, Decode
from completer.engine.generation import Engine

STDLIB = Path(sysconfig.get_paths()["stdlib"])
A, B = "doc-a.py", "doc-b.py"  # document names: no path, nothing in the workspace index


def places_holding(root: object, name: str) -> list[str]:
    """Every place reachable from `root` through the project's own objects, containers
    and weak references that holds `name`, as a key or in a string: an attribute path each."""
    found, seen, stack = [], set(), [(root, "decoder")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if name in value:
                found.append(path)
            continue
        if isinstance(value, (int, float, bytes, np.ndarray)) or value is None or id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            for key, item in value.items():
                stack += [(key, f"{path} key"), (item, f"{path}[{key!r}]")]
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack += [(item, f"{path}[{i}]") for i, item in enumerate(value)]
        elif isinstance(value, weakref.ref):
            stack.append((value(), f"{path}()"))
        elif type(value).__module__.startswith("completer") and hasattr(value, "__dict__"):
            stack += [(item, f"{path}.{attribute}") for attribute, item in vars(value).items()]
    return found


def decode(decoder: LocalDecoder, document: str, text: str, left: tuple[str, str] | None = None,
           edits: bool = False) -> None:
    decoder.enter(document, None, left, None, edits=edits)
    prompt = decoder.engine.model.tokenize(text)
    decoder.decode_prompt(Decode(document=document, language="python", prompt=prompt, prompt_length=len(prompt),
                          max_tokens=12, draft_mode="auto"))


def test_a_closed_document_leaves_nothing_on_the_engine_side_even_with_its_request_in_flight(target, draft):
    decoder = LocalDecoder(Engine(target, draft, n_ctx=2048, calibrate_s=0))
    engine = decoder.engine
    a, b = (STDLIB / "textwrap.py").read_text()[:2500], (STDLIB / "shlex.py").read_text()[:2500]
    for document, text, left, edits in [(A, a, None, False), (A, a, None, True), (B, b, (A, a), False)]:
        with decoder.turn():
            decode(decoder, document, text, left, edits)
    # A's completions' and next edits' caches saved, its text drafted from, its curves.
    assert engine.documents.find(A).snapshots.keys() == {False, True} and engine.documents.find(A).text
    assert engine.tuner.acceptance.tuned_documents() == [A, B]

    inside, closed = threading.Event(), threading.Event()

    def request_for_a() -> None:
        with decoder.turn():
            inside.set()
            closed.wait()
            decode(decoder, A, a + "\n", left=(B, b))  # after the close: it learns and saves for A again

    thread = threading.Thread(target=request_for_a)
    thread.start()
    inside.wait()
    decoder.document_event(Closed(A, None))  # never waits: released when the request lets the engine go
    closed.set()
    thread.join()

    assert places_holding(decoder, A) == []
    assert engine.target.tokens == [] and engine.drafter.sequence.tokens == []  # A's live caches went too
    assert all(not member.states for member in engine.checkpoints.members)
    assert places_holding(decoder, B)  # the walk does find an open document

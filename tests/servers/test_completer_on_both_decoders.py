"""The editor side, the same on every decoder: each test here runs on the local engine
(LocalDecoder over the smol target) and on a real llama-server serving the same model
(ServerDecoder), so that a behaviour cannot exist on one side only. The models are
loaded once for the whole run (the session's `target`, one llama-server process)."""

import threading
import time
import uuid
from dataclasses import replace

import pytest

from completer.config import Config, GenerationOptions, NextEditOptions, PromptOptions
from completer.decoders.clients import LlamaServerClient
from completer.decoders.local import LocalDecoder
from completer.decoders.server import LlamaServerAPI, ServerDecoder
from completer.editor.completer import Completer
from completer.editor.documents import EDIT, INLINE
from completer.editor.next_edit import apply_edits, editable_region
from completer.engine.generation import Engine
from completer.errors import PositionError
from completer.prompt import control_token
from completer.requests import CompletionRequest, Source, StopReason
from completer.workspace import Workspace
from llama_server_process import LlamaServer

# Both decoders give a request 2048 tokens: the local engine's context, and each of the
# server's two slots of 4096.
CONTEXT = 2048
# A server's deadline for one call. What these tests check is not how fast a server is,
# and a 2-core machine running other work evaluated prompts at 14 tokens/s (llama-server's
# threads wait for each other when the cores are taken), where the default 30 s ran out.
SERVER_TIMEOUT_S = 300


@pytest.fixture(scope="session")
def shared_llama_server(llama_server, smol, tmp_path_factory):
    process = LlamaServer(llama_server, smol.target, tmp_path_factory.mktemp("llama-server") / "server.log",
                          slots=2, context=2 * CONTEXT).start()
    yield process
    process.stop()


@pytest.fixture(params=["local", pytest.param("llama-server", marks=pytest.mark.slow)])
def new_completer(request, target):
    """Completer(config, workspace) over a fresh decoder of the parameter's kind."""
    if request.param == "local":
        def make(config: Config, workspace: Workspace | None = None) -> Completer:
            return Completer(LocalDecoder(Engine(target, None, n_ctx=CONTEXT, calibrate_s=0)), config, workspace)
    else:
        url = request.getfixturevalue("shared_llama_server").url

        def make(config: Config, workspace: Workspace | None = None) -> Completer:
            client = LlamaServerClient(url, total_timeout_s=SERVER_TIMEOUT_S)
            return Completer(ServerDecoder(LlamaServerAPI(client)), config, workspace)
    return make


def config(max_tokens: int = 16, **prompt) -> Config:
    return Config(generation=GenerationOptions(max_tokens=max_tokens, time_budget_ms=0, draft_mode="target"),
                  prompt=PromptOptions(**prompt))


def fresh_text() -> str:
    """Python the model completes, under a line no earlier prompt had (a server's slots
    keep what other tests sent)."""
    return (f"# {uuid.uuid4().hex}\nimport math\n\n\ndef mean(values):\n    return sum(values) / len(values)\n\n\n"
            "def variance(values):\n    center = mean(values)\n    return ")


def at_end(document: str, text: str, path: str | None = None) -> CompletionRequest:
    return CompletionRequest(document, path or document, text, len(text), "python")


def within(seconds: float, function, *args):
    """function(*args) from a thread, which must return within `seconds`: a hang fails
    the test rather than hanging it (the thread is left behind as a daemon)."""
    results: list = []
    thread = threading.Thread(target=lambda: results.append(function(*args)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert results, f"{function.__name__} did not return within {seconds} s"
    return results[0]


def test_typing_what_was_shown_is_answered_from_the_forward_cache(new_completer):
    completer = new_completer(config())
    text = fresh_text()
    shown = completer.complete(at_end("a.py", text))
    assert shown.source == Source.MODEL and len(shown.text) > 2, shown
    assert isinstance(shown.stop_reason, StopReason)
    for typed in range(1, len(shown.text)):
        again = completer.complete(at_end("a.py", text + shown.text[:typed]))
        assert (again.source, again.text, again.result) == (Source.FORWARD_CACHE, shown.text[typed:], None)
    stats = completer.stats()
    assert stats.requests == len(shown.text) and stats.forward_cache_hits == len(shown.text) - 1
    assert stats.sessions == 1
    completer.close("a.py")
    assert completer.stats().sessions == 0


def test_a_newer_request_for_the_document_supersedes_the_running_one(new_completer):
    """The older request is decoding a string of digits that goes on (400 tokens: seconds
    on a 2-core CPU) when the newer one comes: it is cancelled and answers nothing.
    Without token healing, which only the local decoder does: healed, a list of numbers
    went on locally (the model re-chose the line break with the indent after it) while the
    server, given the line break as it was, closed the list at once."""
    completer = new_completer(config(max_tokens=400, heal=False))
    text = f"# {uuid.uuid4().hex}\nDIGITS = \"" + "0123456789" * 20
    older_flag = completer.documents.start("a.py", INLINE)
    answers = {}
    older = threading.Thread(target=lambda: answers.setdefault("older", completer.complete(at_end("a.py", text),
                                                                                          older_flag)))
    older.start()
    time.sleep(0.5)
    completer.configure(config(max_tokens=8, heal=False))
    newer = completer.complete(at_end("a.py", text + "0"))
    older.join(60)
    assert (answers["older"].source, answers["older"].text) == (Source.SUPERSEDED, "")
    assert answers["older"].stop_reason == StopReason.CANCELLED
    assert newer.source == Source.MODEL, newer.warning
    assert completer.stats().superseded == 1


def test_a_prompt_that_cannot_fit_gets_an_empty_answer_saying_why_and_the_decoder_stays_free(new_completer):
    """An answer as long as the context leaves no room for any prompt: the request is
    answered at once, saying which options to change, and the next one is served."""
    completer = new_completer(config(max_tokens=CONTEXT))
    request = at_end("a.py", fresh_text())
    completion = within(30, completer.complete, request)
    assert (completion.text, completion.source, completion.stop_reason) == ("", Source.NO_ROOM,
                                                                           StopReason.PROMPT_TOO_LONG)
    where = completer.decoder.connect().context_name
    assert f"{where} less generation.max_tokens {CONTEXT}" in completion.warning
    assert completion.warning.startswith("no completion: the smallest prompt takes")
    assert within(30, completer.warm, request) == 0
    completer.configure(config(max_tokens=8))
    completion = within(120, completer.complete, request)
    assert completion.source == Source.MODEL and completion.warning == ""


def test_a_cursor_outside_the_document_is_a_clear_error(new_completer):
    completer = new_completer(config())
    for call in (completer.complete, completer.warm):
        with pytest.raises(PositionError, match="offset 7 is outside the document"):
            call(CompletionRequest("a.py", "a.py", "x = 1\n", 7))
    assert completer.stats().requests == 0


def test_workspace_documents_left_become_context_and_outside_ones_never_do(new_completer, tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    completer = new_completer(config(max_tokens=4, chunk_lines=16), Workspace([workspace]))
    helper = "".join(f"def helper_{i}(value):\n    return value * {i}\n" for i in range(8))
    secret = "".join(f"API_TOKEN_{i} = 'do-not-send-{i}'\n" for i in range(8))
    completer.complete(at_end("helpers", helper, str(workspace / "helpers.py")))
    completer.complete(at_end("secrets", secret, str(tmp_path / "secrets.py")))
    completion = completer.complete(at_end("main", "import helpers\n\nx = ", str(workspace / "main.py")))
    assert [chunk.path for chunk in completer.ring.chunks] == ["helpers.py"]
    prompt = completer.prompt_text(completion.prompt)
    assert "def helper_7(value)" in prompt and "# helpers.py" in prompt
    assert "do-not-send" not in prompt and "# main.py" in prompt


def test_warming_evaluates_the_prompt_ahead_so_the_completion_evaluates_almost_nothing(new_completer):
    completer = new_completer(config(max_tokens=8))
    request = at_end("a.py", fresh_text())
    warmed = completer.warm(request)
    completion = completer.complete(request)
    assert completion.source == Source.MODEL
    assert warmed >= completion.prompt_tokens - 2 and completion.evaluated_tokens <= 2, (warmed, completion)
    assert completer.stats().warmed_tokens == warmed


# A parameter renamed at its definition: its uses below are the next edit.
SHAPES = ("import math\n\n\ndef area(width, height):\n    return width * height\n\n\n"
          "def perimeter(width, height):\n    return 2 * (width + height)\n")
RENAMED = SHAPES.replace("area(width,", "area(new_width,")
SMALL_REGION = NextEditOptions(lines_above=3, lines_below=3, context_lines=2)


def test_a_next_edit_is_the_difference_between_the_region_and_the_models_rewrite(new_completer):
    """Whatever the model writes: a whole rewrite of the region gives the edits that make
    it, and one cut short gives none."""
    completer = new_completer(replace(config(), edits=SMALL_REGION))
    completer.complete(at_end("shapes.py", SHAPES))  # the text before the rename: the edit history's start
    cursor = RENAMED.index("new_") + len("new_")
    edit = completer.next_edit(CompletionRequest("shapes.py", "shapes.py", RENAMED, cursor, "python"))
    assert edit.source == Source.MODEL, edit.warning
    region = editable_region(RENAMED, cursor, 3, 3)
    if edit.rewrite is None:
        assert edit.edits == [] and edit.stop_reason != StopReason.STOP
    else:
        assert apply_edits(RENAMED, edit.edits) == RENAMED[:region.start] + edit.rewrite + RENAMED[region.end:]
    prompt = completer.prompt_text(edit.prompt)
    assert "-def area(width, height):\n+def area(new_width, height):" in prompt  # the rename, as a diff
    assert completer.stats().edit_requests == 1


def test_a_newer_next_edit_request_supersedes_the_running_one_and_an_inline_request_does_not(new_completer):
    """The older request is still evaluating or rewriting a region of 40 lines (seconds
    on a 2-core CPU) when the newer one comes."""
    completer = new_completer(replace(config(), edits=NextEditOptions(lines_above=20, lines_below=20,
                                                                           context_lines=0)))
    inline_flag, edit_flag = completer.documents.start("a.py", INLINE), completer.documents.start("a.py", EDIT)
    completer.documents.start("a.py", INLINE)
    assert inline_flag.is_set() and not edit_flag.is_set()
    text = f"# {uuid.uuid4().hex}\n" + "".join(f"value_{n} = {n}\n" for n in range(40))
    request = CompletionRequest("a.py", "a.py", text, text.index("value_20"), "python")
    answers = {}
    older = threading.Thread(target=lambda: answers.setdefault("older", completer.next_edit(request, edit_flag)))
    older.start()
    time.sleep(0.5)
    newer = completer.next_edit(replace(request, cursor=request.cursor + 1))
    older.join(120)
    assert (answers["older"].source, answers["older"].edits) == (Source.SUPERSEDED, [])
    assert newer.source == Source.MODEL, newer.warning
    assert completer.stats().superseded == 1


def test_next_edits_are_shown_the_workspace_documents_left_and_never_outside_ones(new_completer, tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    completer = new_completer(replace(config(max_tokens=4, chunk_lines=16), edits=SMALL_REGION), Workspace([workspace]))
    helper = "".join(f"def helper_{i}(value):\n    return value * {i}\n" for i in range(8))
    secret = "".join(f"API_TOKEN_{i} = 'do-not-send-{i}'\n" for i in range(8))
    completer.complete(at_end("helpers", helper, str(workspace / "helpers.py")))
    completer.complete(at_end("secrets", secret, str(tmp_path / "secrets.py")))
    shapes = str(workspace / "shapes.py")
    completer.complete(at_end("shapes", SHAPES, shapes))
    cursor = RENAMED.index("new_") + len("new_")
    edit = completer.next_edit(CompletionRequest("shapes", shapes, RENAMED, cursor, "python"))
    prompt = completer.prompt_text(edit.prompt)
    assert "The file helpers.py:\n" in prompt and "def helper_7(value)" in prompt
    assert "do-not-send" not in prompt and "The file shapes.py:" in prompt


def test_next_edits_and_completions_keep_their_own_caches_of_a_document(target):
    """Their prompts share next to nothing: after a next edit, a completion at the same
    place evaluates almost none of its prompt, and a second next edit almost none of its own."""
    completer = Completer(LocalDecoder(Engine(target, None, n_ctx=CONTEXT, calibrate_s=0)),
                          replace(config(max_tokens=8), edits=SMALL_REGION))
    request = at_end("shapes.py", RENAMED)
    first = completer.complete(request)
    assert first.source == Source.MODEL and first.evaluated_tokens > 40, first
    completer.next_edit(request)
    evaluated = completer.counters.evaluated_tokens
    completer.documents.forget_shown("shapes.py")
    again = completer.complete(request)
    assert again.source == Source.MODEL and again.evaluated_tokens <= 2, again
    completer.next_edit(request)
    assert completer.counters.evaluated_tokens - evaluated - again.evaluated_tokens <= 2
    assert completer.stats().edit_requests == 2


def test_a_region_that_cannot_fit_gets_no_edit_saying_why(new_completer):
    """One line longer than the whole context: nothing left to shrink, an answer at once."""
    completer = new_completer(replace(config(), edits=SMALL_REGION))
    text = "VALUES = [" + ", ".join(str(n) for n in range(4000)) + "]\n"
    edit = within(60, completer.next_edit, CompletionRequest("big.py", "big.py", text, 10, "python"))
    assert (edit.edits, edit.source, edit.stop_reason) == ([], Source.NO_ROOM, StopReason.PROMPT_TOO_LONG)
    assert "does not fit" in edit.warning


def test_a_format_whose_control_tokens_the_model_lacks_gets_no_edit_saying_why(new_completer):
    """Sweep's format spells `<|file_sep|>`, a Qwen2.5-Coder control token that smol's
    vocabulary lacks: the answer says so at once, and the next request is served."""
    completer = new_completer(replace(config(), edits=replace(SMALL_REGION, format="sweep")))
    cursor = RENAMED.index("new_") + len("new_")
    edit = within(60, completer.next_edit, CompletionRequest("shapes.py", "shapes.py", RENAMED, cursor, "python"))
    assert (edit.edits, edit.source) == ([], Source.NO_ROOM)
    assert "<|file_sep|>" in edit.warning and "edits.format sweep" in edit.warning
    assert completer.complete(at_end("shapes.py", RENAMED)).source == Source.MODEL


def test_instincts_chat_reaches_the_model_as_its_control_tokens(new_completer, target):
    """Instinct's format is a ChatML chat, whose `<|im_start|>`/`<|im_end|>` smol's
    vocabulary has: each goes in as its one token. smol answers the chat with prose, not
    the region (no whole rewrite for 20 of 20 edits from attrs's history), so there is
    no edit to show."""
    completer = new_completer(replace(config(), edits=replace(SMALL_REGION, format="instinct")))
    cursor = RENAMED.index("new_") + len("new_")
    edit = within(120, completer.next_edit, CompletionRequest("shapes.py", "shapes.py", RENAMED, cursor, "python"))
    assert edit.source == Source.MODEL, edit.warning
    starts, ends = (control_token(target, text) for text in ("<|im_start|>", "<|im_end|>"))
    assert (edit.prompt.count(starts), edit.prompt.count(ends)) == (3, 2)
    assert "### User Excerpt:\nshapes.py" in completer.prompt_text(edit.prompt)


def test_the_completion_after_an_acceptance_is_computed_ahead_and_answers_that_request_alone(new_completer):
    """While a completion is shown, the one after its acceptance is computed (prefetch):
    the request acceptance makes (its text, its cursor) gets it with no model call, the
    same text that decoding it gives; a request for any other text decodes, and the
    prefetch is gone."""
    completer = new_completer(config())
    text = fresh_text()
    shown = completer.complete(at_end("a.py", text))
    accepted = at_end("a.py", text + shown.text)
    ahead = completer.prefetch(accepted, len(text))
    assert ahead.source == Source.MODEL, ahead  # its text may be empty: the function may end there
    assert completer.prefetch(accepted, len(text)) is None  # already there: kept, not computed again
    served = completer.complete(accepted)
    assert (served.source, served.text) == (Source.PREFETCH, ahead.text)
    # Served, the request is the document's text as one decoded would be: next edits see it.
    session = completer.documents.session("a.py")
    assert (session.seen, session.text, session.cursor) == (accepted.text, accepted.text, accepted.cursor)
    completer.documents.forget_shown("a.py")
    decoded = completer.complete(accepted)
    if isinstance(completer.decoder, LocalDecoder):  # what decoding that request gives
        assert decoded.text == served.text
    else:  # llama-server's output moves with how much of a prompt its slot held (batch numerics): a near tie
        assert decoded.source == Source.MODEL  # flipped once on CI, ' * 100' against the prefetch's ''
    assert (completer.stats().prefetches, completer.stats().prefetch_hits) == (1, 1)

    other = fresh_text()
    shown = completer.complete(at_end("a.py", other))
    accepted = at_end("a.py", other + shown.text)
    completer.prefetch(accepted, len(other))
    elsewhere = replace(accepted, cursor=accepted.cursor - 1)  # the same text, the cursor elsewhere
    assert completer.complete(elsewhere).source == Source.MODEL
    assert completer.complete(accepted).source != Source.PREFETCH  # it was dropped
    completer.prefetch(accepted, len(other))
    assert completer.complete(at_end("a.py", other + "x")).source == Source.MODEL  # the user typed something else
    assert completer.complete(accepted).source != Source.PREFETCH
    assert (completer.stats().prefetches, completer.stats().prefetch_hits) == (3, 1)


def test_a_prefetch_lives_while_the_user_types_the_completion_and_stops_at_anything_else(new_completer):
    completer = new_completer(config())
    text = fresh_text()
    shown = completer.complete(at_end("a.py", text))
    assert len(shown.text) > 1, shown
    accepted = at_end("a.py", text + shown.text)
    completer.prefetch(accepted, len(text))
    for typed in range(len(shown.text) + 1):  # typed in by hand, up to the whole of it
        completer.document_changed("a.py", text + shown.text[:typed])
    completer.document_changed("b.py", "another document")
    assert completer.complete(accepted).source == Source.PREFETCH
    completer.prefetch(accepted, len(text))
    completer.document_changed("a.py", text + shown.text[:1] + "#")
    assert completer.complete(accepted).source != Source.PREFETCH
    completer.prefetch(accepted, len(text))
    completer.document_changed("a.py", text.replace("import math", "import cmath") + shown.text)  # edited above
    assert completer.complete(accepted).source != Source.PREFETCH


def test_a_request_stops_a_running_prefetch_or_waits_for_the_one_it_is_for(new_completer):
    """A prefetch decoding 400 tokens of digits (seconds here): a request for another
    document stops it at once; the request it is for waits for it and is served."""
    completer = new_completer(config(max_tokens=400, heal=False))
    text = f"# {uuid.uuid4().hex}\nDIGITS = \"" + "0123456789" * 20
    results = {}
    prefetching = threading.Thread(target=lambda: results.setdefault("ahead", completer.prefetch(at_end("a.py", text),
                                                                                                len(text) - 10)))
    prefetching.start()
    time.sleep(0.5)
    assert within(60, completer.complete, at_end("b.py", fresh_text())).source == Source.MODEL
    prefetching.join(60)
    assert results["ahead"].source == Source.SUPERSEDED
    completer.configure(config(max_tokens=48, heal=False))
    waiting = threading.Thread(target=lambda: results.setdefault("ahead again", completer.prefetch(
        at_end("a.py", text), len(text) - 10)))
    waiting.start()
    deadline = time.monotonic() + 60
    while completer.stats().prefetches < 2:
        assert time.monotonic() < deadline, "the second prefetch did not start"
        time.sleep(0.01)
    served = within(60, completer.complete, at_end("a.py", text))
    waiting.join(60)
    assert (served.source, served.text) == (Source.PREFETCH, results["ahead again"].text)

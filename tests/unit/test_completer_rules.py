"""The Completer's own rules, over a fake decoder (fake_decoder.py): no model, each test in
milliseconds. Newest request wins, prefetch, the forward cache, next edits made of a
rewrite, post-processing. test_completer_on_both_decoders.py checks the same rules end
to end on the real decoders."""

import threading
from dataclasses import replace

import pytest

from completer.config import Config, GenerationOptions, NextEditOptions
from completer.editor.completer import Completer
from completer.editor.documents import INLINE
from completer.editor.next_edit import apply_edits, editable_region
from completer.requests import CompletionRequest, Source, StopReason, TextEdit
from fake_decoder import FakeDecoder

STATS = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef variance(values):\n    "
# The model's text at the end of STATS: two lines of the function, then the next one.
BODY = "center = mean(values)\n    return sum((v - center) ** 2 for v in values) / len(values)"
MODEL_TEXT = BODY + "\n\n\ndef stdev(values):\n    return variance(values) ** 0.5\n"
# The model's text once BODY is accepted, and what of it is shown.
AFTER_BODY = "\n    # the population variance\n\n\ndef stdev(values):\n    pass\n"
SHOWN_AFTER_BODY = "\n    # the population variance"
WAIT_S = 10  # a hang fails the test rather than hanging it


def at_end(text: str, document: str = "stats.py") -> CompletionRequest:
    return CompletionRequest(document, document, text, len(text), "python")


def completer_over(answers: dict[str, str], config: Config | None = None) -> tuple[Completer, FakeDecoder]:
    decoder = FakeDecoder(answers)
    return Completer(decoder, config or Config(generation=GenerationOptions(time_budget_ms=0))), decoder


def in_thread(function, *args) -> tuple[threading.Thread, dict]:
    """function(*args) started on a thread; its answer lands in the dict under "answer"."""
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("answer", function(*args)), daemon=True)
    thread.start()
    return thread, out


def started(decoder: FakeDecoder) -> None:
    """The decode held (FakeDecoder.hold) has started."""
    assert decoder.started.wait(WAIT_S), "no decode started"


@pytest.fixture
def stats_completer() -> tuple[Completer, FakeDecoder]:
    return completer_over({STATS: MODEL_TEXT, STATS + BODY: AFTER_BODY})


# Post-processing


def test_at_a_line_end_the_model_text_is_cut_to_the_cursors_scope(stats_completer):
    completer, decoder = stats_completer
    completion = completer.complete(at_end(STATS))
    assert (completion.text, completion.source, completion.stop_reason) == (BODY, Source.MODEL, StopReason.END)
    assert len(decoder.decodes) == 1 and list(decoder.decodes[0].stop) == []


def test_mid_line_one_line_is_shown_without_the_bracket_already_there():
    text = "x = mean()\nprint(x)\n"
    completer, decoder = completer_over({"x = mean(": "values)\nprint(x)\n"})
    completion = completer.complete(CompletionRequest("a.py", "a.py", text, len("x = mean("), "python"))
    assert list(decoder.decodes[0].stop) == ["\n"]  # a mid-line completion stops at its line's end
    assert (completion.text, completion.stop_reason) == ("values", StopReason.STOP)


def test_the_decoder_is_told_when_the_text_has_left_the_scope(stats_completer):
    completer, decoder = stats_completer
    completer.complete(at_end(STATS))
    done = decoder.decodes[0].done
    assert not done(BODY) and done(BODY + "\n\n\ndef stdev(values):")


# The forward cache


def test_typing_the_shown_completion_is_answered_with_its_rest_without_decoding(stats_completer):
    completer, decoder = stats_completer
    assert completer.complete(at_end(STATS)).text == BODY
    for typed in range(1, len(BODY)):
        again = completer.complete(at_end(STATS + BODY[:typed]))
        assert (again.source, again.text) == (Source.FORWARD_CACHE, BODY[typed:]), typed
    assert len(decoder.decodes) == 1
    stats = completer.stats()
    assert (stats.requests, stats.forward_cache_hits) == (len(BODY), len(BODY) - 1)


def test_typing_something_else_all_of_it_or_after_forgetting_decodes_again(stats_completer):
    completer, decoder = stats_completer
    shown = completer.complete(at_end(STATS)).text
    assert completer.complete(at_end(STATS + "x")).source == Source.MODEL  # not what was shown
    completer.complete(at_end(STATS))
    assert completer.complete(at_end(STATS + shown)).source == Source.MODEL  # all of it: nothing left to show
    completer.complete(at_end(STATS))
    completer.documents.forget_shown("stats.py")
    assert completer.complete(at_end(STATS + "c")).source == Source.MODEL
    assert len(decoder.decodes) == 6 and completer.stats().forward_cache_hits == 0


def test_the_rest_is_post_processed_for_the_cursor_as_it_is_now(stats_completer):
    """An editor auto-closes the bracket the user types: the cursor is now mid-line, and
    the rest of the shown text is one line, without the bracket already there."""
    completer, decoder = stats_completer
    completer.complete(at_end(STATS))
    typed = STATS + "center = mean("
    again = completer.complete(CompletionRequest("stats.py", "stats.py", typed + ")", len(typed), "python"))
    assert (again.source, again.text) == (Source.FORWARD_CACHE, "values")
    assert len(decoder.decodes) == 1


def test_each_document_has_its_own_forward_cache(stats_completer):
    completer, decoder = stats_completer
    completer.complete(at_end(STATS, "a.py"))
    completer.complete(at_end(STATS, "b.py"))
    assert completer.complete(at_end(STATS + "c", "a.py")).source == Source.FORWARD_CACHE
    completer.close("a.py")
    assert completer.complete(at_end(STATS + "c", "a.py")).source == Source.MODEL
    assert completer.complete(at_end(STATS + "c", "b.py")).source == Source.FORWARD_CACHE


# Newest request wins


def test_a_newer_request_for_the_document_supersedes_the_running_one(stats_completer):
    completer, decoder = stats_completer
    release = decoder.hold()
    older, out = in_thread(completer.complete, at_end(STATS))
    started(decoder)
    newer = completer.complete(at_end(STATS + "c"))
    older.join(WAIT_S)
    release.set()
    assert not older.is_alive(), "the older request was not cancelled"
    assert (out["answer"].source, out["answer"].text, out["answer"].stop_reason) == (Source.SUPERSEDED, "",
                                                                                    StopReason.CANCELLED)
    assert decoder.decodes[0].cancel.is_set()
    assert (newer.source, newer.text) == (Source.MODEL, "")  # no answer for that prompt
    assert completer.stats().superseded == 1


def test_a_request_for_another_document_leaves_the_running_one_alone(stats_completer):
    completer, decoder = stats_completer
    release = decoder.hold()
    running, out = in_thread(completer.complete, at_end(STATS, "a.py"))
    started(decoder)
    assert completer.complete(at_end(STATS, "b.py")).text == BODY
    assert not decoder.decodes[0].cancel.is_set()
    release.set()
    running.join(WAIT_S)
    assert (out["answer"].source, out["answer"].text) == (Source.MODEL, BODY)
    assert completer.stats().superseded == 0


def test_cancelling_the_document_stops_its_request(stats_completer):
    completer, decoder = stats_completer
    decoder.hold()
    running, out = in_thread(completer.complete, at_end(STATS))
    started(decoder)
    completer.documents.cancel("stats.py", INLINE)
    running.join(WAIT_S)
    assert out["answer"].source == Source.SUPERSEDED


def test_a_request_superseded_before_it_decodes_never_reaches_the_decoder(stats_completer):
    completer, decoder = stats_completer
    with completer.request("stats.py") as flag, completer.request("stats.py"):
        assert completer.complete(at_end(STATS), flag).source == Source.SUPERSEDED
    assert decoder.decodes == []


# Prefetch: the completion after the shown one is accepted, computed while it is shown


def shown_then_accepted(completer: Completer) -> CompletionRequest:
    """BODY shown at the end of STATS; the request its acceptance makes."""
    assert completer.complete(at_end(STATS)).text == BODY
    return at_end(STATS + BODY)


def test_the_request_an_acceptance_makes_is_answered_from_the_prefetch(stats_completer):
    completer, decoder = stats_completer
    accepted = shown_then_accepted(completer)
    ahead = completer.prefetch(accepted, len(STATS))
    assert (ahead.source, ahead.text) == (Source.MODEL, SHOWN_AFTER_BODY)
    assert completer.prefetch(accepted, len(STATS)) is None  # already there: kept
    served = completer.complete(accepted)
    assert (served.source, served.text) == (Source.PREFETCH, ahead.text)
    assert len(decoder.decodes) == 2
    stats = completer.stats()
    assert (stats.prefetches, stats.prefetch_hits) == (1, 1)
    # Served, the prefetch's forward cache is the document's.
    typed = completer.complete(at_end(accepted.text + "\n    # the"))
    assert (typed.source, typed.text) == (Source.FORWARD_CACHE, " population variance")
    completer.documents.forget_shown("stats.py")
    assert completer.complete(accepted).source == Source.MODEL  # it served once


def test_a_prefetch_serves_its_own_text_and_cursor_alone(stats_completer):
    completer, decoder = stats_completer
    accepted = shown_then_accepted(completer)
    completer.prefetch(accepted, len(STATS))
    assert completer.complete(replace(accepted, cursor=accepted.cursor - 1)).source == Source.MODEL
    assert completer.complete(accepted).source == Source.MODEL  # that request dropped it
    assert completer.stats().prefetch_hits == 0


def test_a_prefetch_lives_while_the_user_types_the_completion_and_stops_at_anything_else(stats_completer):
    completer, decoder = stats_completer
    accepted = shown_then_accepted(completer)
    completer.prefetch(accepted, len(STATS))
    for typed in range(len(BODY) + 1):  # typed in by hand, up to the whole of it
        completer.document_changed("stats.py", STATS + BODY[:typed])
    completer.document_changed("other.py", "another document")
    assert completer.complete(accepted).source == Source.PREFETCH
    completer.prefetch(accepted, len(STATS))
    completer.document_changed("stats.py", STATS + "#")
    assert completer.complete(accepted).source != Source.PREFETCH
    completer.prefetch(accepted, len(STATS))
    completer.document_changed("stats.py", STATS.replace("mean", "average") + BODY)  # edited above
    assert completer.complete(accepted).source != Source.PREFETCH
    assert completer.stats().prefetch_hits == 1


def test_no_prefetch_starts_while_a_request_runs(stats_completer):
    completer, decoder = stats_completer
    accepted = shown_then_accepted(completer)
    release = decoder.hold()
    running, _ = in_thread(completer.complete, at_end(STATS, "other.py"))
    started(decoder)
    assert completer.prefetch(accepted, len(STATS)) is None
    release.set()
    running.join(WAIT_S)
    assert completer.stats().prefetches == 0


def test_a_request_stops_a_running_prefetch_or_waits_for_the_one_it_is_for(stats_completer):
    completer, decoder = stats_completer
    accepted = shown_then_accepted(completer)
    decoder.hold()
    prefetching, out = in_thread(completer.prefetch, accepted, len(STATS))
    started(decoder)
    assert completer.complete(at_end(STATS, "other.py")).source == Source.MODEL
    prefetching.join(WAIT_S)
    assert out["answer"].source == Source.SUPERSEDED

    release = decoder.hold()
    prefetching, out = in_thread(completer.prefetch, accepted, len(STATS))
    started(decoder)
    waiting, served = in_thread(completer.complete, accepted)
    waiting.join(0.05)
    assert waiting.is_alive()  # waiting for the prefetch, not decoding again
    release.set()
    waiting.join(WAIT_S)
    assert (served["answer"].source, served["answer"].text) == (Source.PREFETCH, SHOWN_AFTER_BODY)
    assert len(decoder.decodes) == 4


# Next edits: the model writes the region again, and the answer is the difference

SHAPES = ("import math\n\n\ndef area(new_width, height):\n    return width * height\n\n\n"
          "def perimeter(width, height):\n    return 2 * (width + height)\n")
CURSOR = SHAPES.index("new_") + len("new_")
SMALL_REGION = NextEditOptions(lines_above=3, lines_below=3, context_lines=2)  # lines 0 to 6


def edit_completer(answer: str) -> tuple[Completer, FakeDecoder]:
    """The instruction format (smol's): the prompt ends with the region's opening tag."""
    return completer_over({"<region>\n": answer}, Config(edits=replace(SMALL_REGION, format="instruction")))


def edit_request() -> CompletionRequest:
    return CompletionRequest("shapes.py", "shapes.py", SHAPES, CURSOR, "python")


def region() -> str:
    return editable_region(SHAPES, CURSOR, 3, 3).text


def test_a_whole_rewrite_gives_the_edits_that_make_it_each_narrowed_to_what_changed():
    rewrite = region().replace("return width", "return new_width")
    completer, decoder = edit_completer(rewrite.replace("new_width,", "new_<cursor>width,") + "</region>\nmore")
    edit = completer.next_edit(edit_request())
    assert decoder.decodes[0].copy_from.startswith(region())  # the decoder may copy-draft from the region
    assert (edit.source, edit.stop_reason, edit.rewrite) == (Source.MODEL, StopReason.STOP, rewrite)
    at = SHAPES.index("return width") + len("return ")
    assert edit.edits == [TextEdit(at, at, "new_")]
    assert apply_edits(SHAPES, edit.edits) == SHAPES.replace("return width", "return new_width")
    stats = completer.stats()
    assert (stats.edit_requests, stats.edits_suggested) == (1, 1)


def test_a_rewrite_cut_short_or_emptying_the_region_gives_no_edit():
    completer, _ = edit_completer(region().replace("return width", "return new_width"))  # no closing tag
    edit = completer.next_edit(edit_request())
    assert (edit.edits, edit.rewrite, edit.stop_reason) == ([], None, StopReason.END)
    completer, _ = edit_completer("\n</region>")
    assert completer.next_edit(edit_request()).edits == []
    completer, _ = edit_completer(region() + "</region>")  # the region as it is: nothing to do
    edit = completer.next_edit(edit_request())
    assert (edit.edits, edit.rewrite) == ([], region())
    assert completer.stats().edits_suggested == 0


def test_a_newer_next_edit_supersedes_the_running_one_and_an_inline_request_does_not():
    completer, decoder = edit_completer(region() + "</region>")
    release = decoder.hold()
    older, out = in_thread(completer.next_edit, edit_request())
    started(decoder)
    completer.complete(at_end(SHAPES, "shapes.py"))  # an inline request for the document
    assert not decoder.decodes[0].cancel.is_set()
    newer = completer.next_edit(replace(edit_request(), cursor=CURSOR + 1))
    older.join(WAIT_S)
    release.set()
    assert not older.is_alive(), "the older next edit was not cancelled"
    assert (out["answer"].source, out["answer"].edits) == (Source.SUPERSEDED, [])
    assert newer.source == Source.MODEL
    assert completer.stats().superseded == 1


# Closing a document: nothing of it stays on the editor side, whatever was in flight

CLOSED, OTHER = "file:///project/closed.py", "file:///project/other.py"


def places_holding(root: object, key: str) -> list[str]:
    """Every place reachable from `root` (attributes, dict keys and values, items) that
    holds the string `key`, as a path of attribute names and indexes. The decoder is left
    out: its side of the seam has its own close."""
    found, seen, stack = [], set(), [("completer", root)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if value == key:
                found.append(where)
            continue
        if id(value) in seen or callable(value) or isinstance(value, (int, float, bool, type(None), FakeDecoder)):
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            stack.extend((f"{where} key", item) for item in value)
            stack.extend((f"{where}[{item!r}]", item_value) for item, item_value in value.items())
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend((f"{where}[{index}]", item) for index, item in enumerate(value))
        elif hasattr(value, "__dict__"):
            stack.extend((f"{where}.{name}", attribute) for name, attribute in vars(value).items())
    return found


def closing_completer() -> tuple[Completer, FakeDecoder]:
    """Inline completions and next edits both answered; chunks of documents left kept."""
    answers = {STATS: MODEL_TEXT, STATS + BODY: AFTER_BODY, "<region>\n": region() + "</region>"}
    return completer_over(answers, Config(generation=GenerationOptions(time_budget_ms=0),
                                          edits=replace(SMALL_REGION, format="instruction")))


def in_document(document: str, text: str, cursor: int | None = None) -> CompletionRequest:
    return CompletionRequest(document, document.removeprefix("file://"), text,
                             len(text) if cursor is None else cursor, "python")


IN_FLIGHT = ("nothing", "inline", "next edit", "warm", "prefetch running", "prefetch kept")


@pytest.mark.parametrize("in_flight", IN_FLIGHT)
def test_a_closed_document_leaves_nothing_on_the_editor_side_whatever_was_in_flight(in_flight):
    """The closed document was completed and edited (a session, a forward cache, edit
    history), another document is open, and `in_flight` runs for the closed one when it
    closes: afterwards no place the Completer reaches holds its key, while the other
    document's state is still there."""
    completer, decoder = closing_completer()
    completer.complete(in_document(OTHER, STATS))
    completer.complete(in_document(CLOSED, STATS + "x"))
    completer.complete(in_document(CLOSED, STATS))  # an edit to the document: an event in the history
    accepted = in_document(CLOSED, STATS + BODY)
    work = {"inline": lambda: completer.complete(in_document(CLOSED, STATS + "y")),
            "next edit": lambda: completer.next_edit(in_document(CLOSED, SHAPES, CURSOR)),
            "warm": lambda: completer.warm(in_document(CLOSED, STATS)),
            "prefetch running": lambda: completer.prefetch(accepted, len(STATS))}.get(in_flight)
    if in_flight == "prefetch kept":
        completer.prefetch(accepted, len(STATS))
    release, running = decoder.hold(), None
    if work is not None:
        running, _ = in_thread(work)
        started(decoder)
    completer.close(CLOSED)
    release.set()
    if running is not None:
        running.join(WAIT_S)
        assert not running.is_alive()
    assert places_holding(completer, CLOSED) == []
    assert places_holding(completer, OTHER) != []  # the walk finds a document's state where it is
    assert completer.stats().sessions == 1

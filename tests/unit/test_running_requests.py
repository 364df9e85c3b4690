"""The newest request of a kind for a document wins (editor/documents.py), and one
prefetch is kept at a time (editor/prefetch.py): both without a model."""

import threading

from completer.editor.prefetch import PrefetchSlot
from completer.editor.documents import EDIT, INLINE, WARM, Documents
from completer.requests import CompletionRequest


def test_a_new_request_cancels_the_older_one_of_its_kind_for_its_document_alone():
    documents = Documents()
    older, other, edit = documents.start("a.py", INLINE), documents.start("b.py", INLINE), documents.start("a.py", EDIT)
    newer = documents.start("a.py", INLINE)
    assert older.is_set() and not newer.is_set() and not other.is_set() and not edit.is_set()
    documents.cancel("b.py", INLINE)
    assert other.is_set() and not newer.is_set()


def test_a_request_is_forgotten_when_it_ends_unless_a_newer_one_took_its_place():
    documents = Documents()
    with documents.running("a.py", INLINE) as first:
        assert documents.is_running("a.py", INLINE) and documents.any_running(INLINE)
        second = documents.start("a.py", INLINE)  # a newer request came while the first ran
    assert first.is_set() and documents.is_running("a.py", INLINE)  # the first's end leaves the newer one
    documents.close("a.py")
    assert second.is_set() and not documents.any_running(INLINE) and documents.keys() == []


def test_a_request_given_its_flag_is_its_callers_to_end():
    documents = Documents()
    with documents.running("a.py", WARM) as flag:
        with documents.owned("a.py", WARM, flag) as given:
            assert given is flag
        assert documents.is_running("a.py", WARM)
    assert documents.keys() == []


def test_a_request_is_forgotten_when_its_work_raises():
    documents = Documents()
    try:
        with documents.running("a.py", INLINE):
            raise ValueError
    except ValueError:
        pass
    assert documents.keys() == []


def test_requests_on_many_threads_leave_none_behind():
    documents = Documents()

    def requests(key: str) -> None:
        for index in range(200):
            with documents.running(key, (INLINE, EDIT)[index % 2]):
                pass
    threads = [threading.Thread(target=requests, args=(key,)) for key in ("a", "a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert documents.keys() == []


def accepted(text: str, cursor: int) -> CompletionRequest:
    return CompletionRequest("a.py", "a.py", text, cursor, "python")


def test_one_prefetch_is_kept_and_a_new_one_stops_the_one_before():
    slot = PrefetchSlot()
    first = slot.begin(accepted("x = 1\n", 6), 4)
    assert first is not None
    assert slot.begin(accepted("x = 1\n", 6), 4) is None  # that one is already kept
    second = slot.begin(accepted("y = 2\n", 6), 4)
    assert first.cancel.is_set() and not second.cancel.is_set()


def test_a_prefetch_serves_its_request_once_and_any_other_request_stops_it():
    slot = PrefetchSlot()
    ahead = slot.begin(accepted("x = 1\n", 6), 4)
    assert slot.take(accepted("x = 1\n", 6)) is ahead
    assert slot.take(accepted("x = 1\n", 6)) is None  # taken: it served once
    other = slot.begin(accepted("x = 1\n", 6), 4)
    assert slot.take(accepted("x = 2\n", 6)) is None and other.cancel.is_set()


def test_a_prefetch_is_dropped_only_when_the_rule_says_so():
    slot = PrefetchSlot()
    ahead = slot.begin(accepted("x = 1\n", 6), 4)
    slot.drop(lambda kept: kept.request.document == "b.py")
    assert not ahead.cancel.is_set() and slot.take(accepted("x = 1\n", 6)) is ahead
    ahead = slot.begin(accepted("x = 1\n", 6), 4)
    slot.drop(lambda kept: kept.request.document == "a.py")
    assert ahead.cancel.is_set() and slot.take(accepted("x = 1\n", 6)) is None

"""The newest request for a key wins (editor/running.py), and one prefetch is kept at a
time (editor/prefetch.py): both without a model."""

import threading

from completer.editor.prefetch import PrefetchSlot
from completer.editor.running import RunningRequests
from completer.requests import CompletionRequest


def test_a_new_request_cancels_the_older_one_for_its_key_alone():
    running = RunningRequests()
    older, other = running.start("a.py"), running.start("b.py")
    newer = running.start("a.py")
    assert older.is_set() and not newer.is_set() and not other.is_set()
    running.cancel("b.py")
    assert other.is_set() and not newer.is_set()


def test_a_request_is_forgotten_when_it_ends_unless_a_newer_one_took_its_key():
    running = RunningRequests()
    with running.request("a.py") as first:
        assert "a.py" in running and running
        second = running.start("a.py")  # a newer request came while the first ran
    assert first.is_set() and "a.py" in running  # the first's end leaves the newer one registered
    with running.request("a.py", second) as given:
        assert given is second
    assert "a.py" not in running and not running


def test_a_request_is_forgotten_when_its_work_raises():
    running = RunningRequests()
    try:
        with running.request("a.py"):
            raise ValueError
    except ValueError:
        pass
    assert not running


def test_requests_on_many_threads_leave_none_behind():
    running = RunningRequests()

    def requests(key: str) -> None:
        for _ in range(200):
            with running.request(key):
                pass
    threads = [threading.Thread(target=requests, args=(key,)) for key in ("a", "a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not running


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

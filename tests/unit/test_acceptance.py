"""What of an accepted suggestion is still in the document later (lsp/acceptance.py): the
accepted span follows the edits around it, and a check counts what is left of its text."""

from hypothesis import given
from hypothesis import strategies as st

from completer.lsp.acceptance import RETENTION_CHECKS_S, Acceptances, moved_end, moved_start

WORDS = st.text(alphabet="abcdefghij \n()=:", min_size=1, max_size=40)


def replace(text: str, start: int, end: int, inserted: str) -> str:
    return text[:start] + inserted + text[end:]


def accepted_in(before: str, completion: str, after: str) -> tuple[Acceptances, object]:
    acceptances = Acceptances()
    acceptances.offer(1, "file:///a.py", len(before), completion)
    return acceptances, acceptances.take(1)


@given(WORDS, WORDS, WORDS, st.lists(st.tuples(st.booleans(), st.integers(0, 200), st.integers(0, 20), WORDS),
                                      max_size=8))
def test_edits_outside_what_was_accepted_leave_all_of_it_there(before, completion, after, edits):
    """Inserting, deleting and replacing before or after the accepted text, however far it
    moves it: all of it is still found."""
    acceptances, accepted = accepted_in(before, completion, after)
    text = before + completion + after
    for in_front, at, length, inserted in edits:
        start, end = accepted.start, accepted.end
        if in_front:
            a = min(at, start)
            b = min(a + length, start)
        else:
            a = min(end + at, len(text))
            b = min(a + length, len(text))
        text = replace(text, a, b, inserted)
        acceptances.changed("file:///a.py", a, b, len(inserted))
        acceptances.changed("file:///other.py", 0, len(text), 0)  # another document's changes move nothing here
        assert text[accepted.start : accepted.end] == completion
    acceptances.check(accepted, 0, text)
    assert (acceptances.retention[0].checked, acceptances.retention[0].retained) == (len(completion), len(completion))


@given(st.text(alphabet="abc", min_size=0, max_size=30), st.integers(0, 29), st.integers(1, 10))
def test_text_deleted_from_what_was_accepted_is_not_counted(completion_tail, at, length):
    """Around it, characters it has none of: nothing deleted is found there instead."""
    completion = "unique_name = compute(" + completion_tail
    acceptances, accepted = accepted_in("#\n", completion, "\n#\n")
    text = "#\n" + completion + "\n#\n"
    a = accepted.start + min(at, len(completion))
    b = min(a + length, accepted.end)
    text = replace(text, a, b, "")
    acceptances.changed("file:///a.py", a, b, 0)
    assert text[accepted.start : accepted.end] == completion[: a - accepted.start] + completion[b - accepted.start :]
    acceptances.check(accepted, 0, text)
    assert acceptances.retention[0].retained == len(completion) - (b - a)


def test_a_span_keeps_out_text_inserted_at_its_ends_and_takes_in_what_replaces_its_edges():
    assert [moved_start(p, 5, 5, 3) for p in (4, 5, 6)] == [4, 8, 9]  # an insertion at 5
    assert [moved_end(p, 5, 5, 3) for p in (4, 5, 6)] == [4, 5, 9]
    assert [moved_start(p, 5, 10, 3) for p in (4, 5, 7, 10)] == [4, 5, 5, 8]  # [5, 10) replaced by 3
    assert [moved_end(p, 5, 10, 3) for p in (5, 7, 10, 11)] == [5, 8, 8, 9]


def test_parts_then_the_rest_count_each_character_once():
    acceptances = Acceptances()
    acceptances.offer(7, "file:///a.py", 10, "return total / count")
    assert acceptances.take(7, 6).text == "return"
    assert acceptances.take(7, 6) is None  # the same part again adds nothing
    assert acceptances.take(7, 12).text == " total"
    assert acceptances.take(7).text == " / count"  # the accept command: the rest
    assert acceptances.take(7) is None
    assert acceptances.take(8) is None  # an item this server never returned
    assert (acceptances.accepted_chars, acceptances.partially_accepted) == (len("return total / count"), 1)
    assert [(a.text, a.start, a.end) for a in acceptances.tracked] == [
        ("return", 10, 16), (" total", 16, 22), (" / count", 22, 30)]


def test_each_check_counts_once_and_a_closed_document_ends_the_checks():
    acceptances, accepted = accepted_in("", "value = 1", "")
    acceptances.check(accepted, 0, "value = 2")
    assert (acceptances.retention[0].checked, acceptances.retention[0].retained) == (9, 8)
    acceptances.check(accepted, len(RETENTION_CHECKS_S) - 1, "value = 1")
    assert acceptances.tracked == []
    acceptances.check(accepted, len(RETENTION_CHECKS_S) - 1, "value = 1")  # forgotten: nothing more
    assert acceptances.retention[-1].checked == 9
    acceptances, accepted = accepted_in("", "value = 1", "")
    acceptances.check(accepted, 0, None)
    acceptances.check(accepted, 1, "value = 1")  # the document was closed at the first check
    assert [r.checked for r in acceptances.retention] == [0, 0] and acceptances.tracked == []


def test_the_items_remembered_are_the_newest():
    acceptances = Acceptances()
    for item in range(100):
        acceptances.offer(item, "file:///a.py", 0, "x")
    assert acceptances.take(0) is None and acceptances.take(99).text == "x"

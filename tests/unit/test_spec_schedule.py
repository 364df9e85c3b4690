"""The speculative-token schedule by batch size written for vLLM from load measurements
(completer/bench/spec_schedule.py): each measured batch size drafts what answered it
fastest, and the ranges cover every batch size once, as vLLM's scheduler requires."""

import json

from hypothesis import given
from hypothesis import strategies as st

from completer.bench.spec_schedule import LoadPoint, best_draft_tokens, schedule, speculative_config


def drafts_at(ranges: list[tuple[int, int, int]], batch: int) -> int:
    (draft_tokens,) = [k for first, last, k in ranges if first <= batch <= last]
    return draft_tokens


def test_drafting_helps_alone_and_costs_under_load_so_the_schedule_stops_drafting_as_the_batch_grows():
    points = [LoadPoint(1, 0, 900), LoadPoint(1, 4, 600), LoadPoint(2, 0, 1000), LoadPoint(2, 4, 800),
              LoadPoint(4, 0, 1500), LoadPoint(4, 4, 1700), LoadPoint(8, 0, 3000), LoadPoint(8, 4, 3900)]
    assert schedule(points, 256) == [(1, 3, 4), (4, 256, 0)]


def test_the_median_of_the_runs_decides_and_a_tie_goes_to_the_shorter_draft():
    points = [LoadPoint(1, 4, 500), LoadPoint(1, 4, 900), LoadPoint(1, 4, 950), LoadPoint(1, 0, 800),
              LoadPoint(1, 0, 800), LoadPoint(1, 0, 800), LoadPoint(2, 2, 700), LoadPoint(2, 0, 700)]
    assert best_draft_tokens(points) == {1: 0, 2: 0}  # 4's median is 900, though its best run was 500


def test_the_config_drafts_at_most_the_longest_draft_of_the_schedule():
    config = json.loads(speculative_config([(1, 1, 4), (2, 8, 2), (9, 64, 0)], {"method": "ngram",
                                                                               "prompt_lookup_max": 4}))
    assert config == {"method": "ngram", "prompt_lookup_max": 4, "num_speculative_tokens": 4,
                      "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 8, 2], [9, 64, 0]]}
    assert json.loads(speculative_config([(1, 64, 0)], {"method": "ngram"}))["num_speculative_tokens"] == 1


@given(st.dictionaries(st.integers(1, 64), st.dictionaries(st.sampled_from([0, 1, 2, 4, 8]), st.floats(1, 1e4),
                                                           min_size=1), min_size=1),
       st.integers(1, 128))
def test_the_ranges_start_at_one_cover_each_batch_size_once_and_draft_the_best_measured(measured, max_batch):
    points = [LoadPoint(batch, k, ms) for batch, by_k in measured.items() for k, ms in by_k.items()]
    ranges = schedule(points, max_batch)
    assert ranges[0][0] == 1 and ranges[-1][1] == max(max_batch, *measured)
    assert all(first <= last for first, last, _ in ranges)
    assert all(ranges[i][1] + 1 == ranges[i + 1][0] for i in range(len(ranges) - 1))  # contiguous, no overlap
    assert all(ranges[i][2] != ranges[i + 1][2] for i in range(len(ranges) - 1))  # neighbours merged
    for batch, by_k in measured.items():
        assert by_k[drafts_at(ranges, batch)] == min(by_k.values())

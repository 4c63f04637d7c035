"""The per-request index: longest match first, incremental updates, bounded fan-out."""

from __future__ import annotations

import gc

import pytest

from treespec.drafter.ngram.history_index import LocalMatch, RequestIndex
from treespec.drafter.ngram.observations import ObservationCursor


def index_of(tokens: list[int], min_window: int = 1, max_window: int = 4) -> RequestIndex:
    index = RequestIndex(min_window, max_window)
    index.extend(tokens)
    return index


def test_longest_window_first_then_most_recent() -> None:
    #          0  1  2  3  4  5  6  7  8  9 10 11
    history = [1, 2, 3, 9, 5, 2, 3, 7, 8, 1, 2, 3]
    matches = index_of(history).matches(length=3)
    # suffix [1, 2, 3] occurred at 0..2 (continuation from 3); [2, 3] also at 5..6 (from 7); [3] nowhere else
    assert matches == [LocalMatch(3, 3, (9, 5, 2)), LocalMatch(2, 7, (7, 8, 1))]


def test_incremental_extend_equals_building_at_once() -> None:
    history = [4, 5, 6, 4, 5, 7, 4, 5, 6, 4, 5]
    built = index_of(history)
    grown = RequestIndex(1, 4)
    for token in history:
        grown.extend([token])
    assert grown.matches(5) == built.matches(5)
    # the suffix [5, 6, 4, 5] occurred at 1..4: its continuation starts at 5
    assert built.matches(5)[0] == LocalMatch(4, 5, (7, 4, 5, 6, 4))


def test_min_window_filters_short_matches() -> None:
    history = [1, 2, 3, 4, 9, 4]
    assert index_of(history, min_window=1).matches(2) == [LocalMatch(1, 4, (9, 4))]
    assert index_of(history, min_window=2).matches(2) == []


def test_continuations_are_capped_and_limit_respected() -> None:
    history = [7, 1] * 10 + [7]
    index = index_of(history, max_window=2)
    matches = index.matches(length=3, limit=2)
    assert len(matches) == 2
    assert all(len(m.continuation) <= 3 for m in matches)


def test_fanout_keeps_only_latest_occurrences() -> None:
    history = [5, 1, 5, 2, 5, 3, 5, 4, 5, 6, 5]
    index = RequestIndex(1, 1, positions_per_ngram=2)
    index.extend(history)
    # 5 ends at 1, 3, ..., 11; only the 2 latest starts (9, and 11: the suffix itself) are kept
    assert [m.start for m in index.matches(1)] == [9]


@pytest.mark.parametrize(("keep", "starts"), [(1, []), (3, [7, 5]), (8, [7, 5, 3, 1])])
def test_fanout_keeps_the_latest_positions_of_each_ngram(keep: int, starts: list[int]) -> None:
    history = [5, 1, 5, 2, 5, 3, 5, 4, 5]  # 5 ends at 1, 3, 5, 7 and 9 (the suffix itself)
    index = RequestIndex(1, 1, positions_per_ngram=keep)
    index.extend(history)
    assert [m.start for m in index.matches(1)] == starts


def test_a_long_request_s_index_stays_out_of_the_collectors_full_passes() -> None:
    """An index holds only values the cyclic collector stops tracking: every live request's index
    would otherwise lengthen each full pass (about 12 objects a token; a pass stalls drafting)."""
    gc.collect()
    before = len(gc.get_objects())
    index = index_of([i % 97 for i in range(5000)], max_window=12)  # each n-gram seen many times
    gc.collect()
    assert len(gc.get_objects()) - before < 100
    assert index.matches(2)[0] == LocalMatch(12, 4903, (53, 54))  # 97 tokens back: the same 12-gram


def test_observations_wait_for_full_continuations_then_flush_the_tail() -> None:
    cursor = ObservationCursor(next_start=3, min_window=1, max_window=2, branch_length=2)
    history = [10, 11, 12, 13]
    assert cursor.take(history, final=False) == []  # the continuation from 3 has 1 of its 2 tokens
    history += [14]
    assert cursor.take(history, final=False) == [((12,), (13, 14)), ((11, 12), (13, 14))]
    history += [15]
    assert cursor.take(history, final=True) == [
        ((13,), (14, 15)),
        ((12, 13), (14, 15)),
        ((14,), (15,)),
        ((13, 14), (15,)),
    ]
    assert cursor.take(history, final=True) == []

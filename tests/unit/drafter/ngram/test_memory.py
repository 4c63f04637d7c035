"""The NgramMemory contract, the same on the in-process memory and on Redis."""

from __future__ import annotations

import gc
import time

from tests.unit.drafter.ngram.backends import Backend, config
from treespec.drafter.ngram.local_memory import InProcessMemory
from treespec.drafter.ngram.memory import Continuation, Observation

CONTEXT = (1, 2, 3)


def _repeat(context: tuple[int, ...], continuation: tuple[int, ...], times: int) -> list[Observation]:
    return [(context, continuation)] * times


def test_counts_accumulate_across_records(backend: Backend) -> None:
    memory = backend.open(config())
    memory.record(_repeat(CONTEXT, (4, 5), 2))
    assert memory.flush()
    assert memory.lookup([CONTEXT]) == [[Continuation((4, 5), 2)]]
    memory.record(_repeat(CONTEXT, (4, 5), 3))
    assert memory.flush()
    assert memory.lookup([CONTEXT]) == [[Continuation((4, 5), 5)]]  # this replica sees its own writes


def test_most_frequent_first_and_one_list_per_context(backend: Backend) -> None:
    memory = backend.open(config())
    observations = _repeat(CONTEXT, (7,), 1) + _repeat(CONTEXT, (8, 9), 3) + _repeat(CONTEXT, (6,), 2)
    memory.record([*observations, ((9,), (1,))])
    assert memory.flush()
    found = memory.lookup([CONTEXT, (42,), (9,)])
    assert found[0] == [Continuation((8, 9), 3), Continuation((6,), 2), Continuation((7,), 1)]
    assert found[1:] == [[], [Continuation((1,), 1)]]


def test_fanout_keeps_the_most_frequent(backend: Backend) -> None:
    memory = backend.open(config(fanout=3))
    for rank, count in enumerate([5, 4, 3, 2, 1]):
        memory.record(_repeat(CONTEXT, (rank,), count))
        assert memory.flush()
    assert memory.lookup([CONTEXT]) == [[Continuation((0,), 5), Continuation((1,), 4), Continuation((2,), 3)]]


def test_capacity_evicts_the_least_recently_written(backend: Backend) -> None:
    capacity, extra = 5, 3
    memory = backend.open(config(namespace="capacity", capacity=capacity))
    for i in range(capacity + extra):
        memory.record([((i,), (i + 100,))])
        assert memory.flush()
        assert backend.count_contexts(memory, "capacity") <= capacity
        time.sleep(0.002)  # distinct write times (Redis stamps contexts in milliseconds)
    found = memory.lookup([(i,) for i in range(capacity + extra)])
    assert found[:extra] == [[]] * extra
    assert found[extra:] == [[Continuation((i + 100,), 1)] for i in range(extra, capacity + extra)]
    assert backend.count_contexts(memory, "capacity") == capacity


def test_contexts_not_written_for_ttl_are_forgotten(backend: Backend) -> None:
    memory = backend.open(config(ttl_s=1.0))
    memory.record([((1,), (2,))])
    assert memory.flush()
    time.sleep(0.55)
    memory.record([((3,), (4,))])
    assert memory.flush()
    time.sleep(0.55)  # (1,) was last written 1.1 s ago, (3,) 0.55 s ago
    assert memory.lookup([(1,), (3,)]) == [[], [Continuation((4,), 1)]]


def test_lookup_of_nothing_and_record_of_nothing(backend: Backend) -> None:
    memory = backend.open(config())
    memory.record([])
    assert memory.flush()
    assert memory.lookup([]) == []
    assert memory.healthy


def test_the_in_process_memory_stays_out_of_the_collectors_full_passes() -> None:
    """Its contexts hold only values the cyclic collector stops tracking: a long-running drafter's
    memory of millions of contexts must not lengthen every full pass (each such pass stalls drafting)."""
    memory = InProcessMemory(config())
    gc.collect()
    before = len(gc.get_objects())
    memory.record([((i, i + 1, i + 2), (i + 3, i + 4)) for i in range(5000)])
    memory.record([((i, i + 1, i + 2), (i + 5,)) for i in range(0, 5000, 7)])  # more than one continuation
    gc.collect()
    assert len(memory) == 5000
    assert len(gc.get_objects()) - before < 100
    assert memory.lookup([(7, 8, 9)]) == [[Continuation((12,), 1), Continuation((10, 11), 1)]]

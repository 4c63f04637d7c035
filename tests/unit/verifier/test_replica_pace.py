"""When a propose round waits on a replica: misses in a row make it lagging, probes bring it back."""

from __future__ import annotations

import pytest

from treespec.verifier.replica_pace import PacePolicy, ReplicaPace


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_misses_in_a_row_make_a_replica_lagging_and_an_answer_resets_them() -> None:
    pace = ReplicaPace(PacePolicy(miss_limit=3, probe_interval_s=1.0), Clock())
    assert [pace.missed("a", "a"), pace.missed("a", "a")] == [False, False]
    pace.answered("a", "a")  # not in a row: counting starts again
    assert [pace.missed("a", "a") for _ in range(3)] == [False, False, True]
    assert pace.lagging("a") and not pace.lagging("b")
    assert not pace.missed("a", "a")  # it turned lagging once


def test_a_lagging_replica_is_asked_once_per_probe_interval() -> None:
    clock = Clock()
    pace = ReplicaPace(PacePolicy(miss_limit=1, probe_interval_s=1.0), clock)
    assert pace.asks("a")
    pace.missed("a", "a")
    assert not pace.asks("a")
    clock.now += 0.99
    assert not pace.asks("a")
    clock.now += 0.01
    assert pace.asks("a") and not pace.asks("a")  # the probe; the next one is an interval away
    pace.missed("a", "a")  # the probe missed too: still lagging
    clock.now += 1.0
    assert pace.asks("a")
    pace.answered("a", "a")
    assert not pace.lagging("a") and pace.asks("a") and pace.asks("a")


def test_forget_starts_a_clean_record() -> None:
    pace = ReplicaPace(PacePolicy(miss_limit=1), Clock())
    pace.missed("a", "a")
    pace.forget("a")
    assert not pace.lagging("a") and pace.asks("a")


@pytest.mark.parametrize("kwargs", [{"miss_limit": 0}, {"probe_interval_s": 0.0}])
def test_bad_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PacePolicy(**kwargs)  # type: ignore[arg-type]

"""When a propose round waits on a replica: misses in a row make it lagging; a lagging one gets one
probe at a time, and a probe answered in time brings it back."""

from __future__ import annotations

import pytest

from treespec.verifier.replica_pace import Ask, PacePolicy, ReplicaPace

DEADLINE_S = 0.05


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_misses_in_a_row_make_a_replica_lagging_and_an_answer_resets_them() -> None:
    pace = ReplicaPace(PacePolicy(miss_limit=3), Clock())
    assert [pace.missed("a", "a"), pace.missed("a", "a")] == [False, False]
    pace.answered("a", "a")  # not in a row: counting starts again
    assert [pace.missed("a", "a") for _ in range(3)] == [False, False, True]
    assert pace.lagging("a") and not pace.lagging("b")
    assert pace.ask("a") is Ask.PROBE and pace.ask("b") is Ask.WAIT
    assert not pace.missed("a", "a")  # it turned lagging once


def test_one_probe_at_a_time_and_one_in_time_brings_the_replica_back() -> None:
    clock = Clock()
    pace = ReplicaPace(PacePolicy(miss_limit=1), clock)
    pace.missed("a", "a")
    pace.probe_sent("a", 7)
    assert pace.ask("a") is Ask.SKIP  # hung: the probe is still out, nothing more is sent
    pace.replied("a", 6, DEADLINE_S, "a")  # an older round's reply: not the probe
    assert pace.ask("a") is Ask.SKIP
    clock.now += 10.0
    pace.replied("a", 7, DEADLINE_S, "a")  # answered, but late: still lagging, probe again
    assert pace.lagging("a") and pace.ask("a") is Ask.PROBE
    pace.probe_sent("a", 8)
    clock.now += DEADLINE_S / 2
    pace.replied("a", 8, DEADLINE_S, "a")
    assert not pace.lagging("a") and pace.ask("a") is Ask.WAIT


def test_forget_starts_a_clean_record() -> None:
    pace = ReplicaPace(PacePolicy(miss_limit=1), Clock())
    pace.missed("a", "a")
    pace.forget("a")
    assert not pace.lagging("a") and pace.ask("a") is Ask.WAIT


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError):
        PacePolicy(miss_limit=0)

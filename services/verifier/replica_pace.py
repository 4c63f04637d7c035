"""Whether a propose round waits on a drafter replica: one that keeps missing the deadline is not waited on.

A replica that is alive but does not answer in time (hung, stopped, swapping, overloaded) costs every
engine step the whole deadline and gives no tree for it: slower than plain decoding. After `miss_limit`
rounds missed in a row the replica is *lagging*: rounds leave it out (its requests decode plainly, or
move to a replica that keeps pace), except for one probe round every `probe_interval_s`; one answer in
time makes it a full member again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PacePolicy:
    miss_limit: int = 3  # rounds missed in a row before the engine stops waiting on a replica
    probe_interval_s: float = 1.0  # how often a lagging replica is asked again

    def __post_init__(self) -> None:
        if self.miss_limit < 1:
            raise ValueError("miss_limit must be at least 1")
        if self.probe_interval_s <= 0:
            raise ValueError("probe_interval_s must be positive")


@dataclass
class _Record:
    misses: int = 0
    next_probe_s: float = 0.0


class ReplicaPace:
    """Per replica: the deadlines it missed in a row. Not thread-safe: the owner calls it under its lock."""

    def __init__(self, policy: PacePolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._records: dict[Hashable, _Record] = {}

    def lagging(self, replica: Hashable) -> bool:
        record = self._records.get(replica)
        return record is not None and record.misses >= self.policy.miss_limit

    def asks(self, replica: Hashable) -> bool:
        """Whether this round asks `replica` for trees (and waits on it); a lagging one only when a probe
        is due, which schedules the next."""
        if not self.lagging(replica):
            return True
        record = self._records[replica]
        now = self._clock()
        if now < record.next_probe_s:
            return False
        record.next_probe_s = now + self.policy.probe_interval_s
        return True

    def answered(self, replica: Hashable, name: str) -> None:
        if self.lagging(replica):
            log.info("drafter replica %s answers in time again", name)
        self._records.pop(replica, None)

    def missed(self, replica: Hashable, name: str) -> bool:
        """Count a missed deadline; True when this miss makes the replica lagging."""
        record = self._records.setdefault(replica, _Record())
        record.misses += 1
        if record.misses != self.policy.miss_limit:
            return False
        record.next_probe_s = self._clock() + self.policy.probe_interval_s
        log.warning(
            "drafter replica %s missed the draft deadline %d rounds in a row: not waiting on it, asking it"
            " again every %.1f s",
            name,
            record.misses,
            self.policy.probe_interval_s,
        )
        return True

    def forget(self, replica: Hashable) -> None:
        """The replica went away: a new stream starts with a clean record."""
        self._records.pop(replica, None)

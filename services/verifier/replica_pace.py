"""Whether a propose round waits on a drafter replica: one that keeps missing the deadline is not waited on.

A replica that is alive but does not answer in time (hung, stopped, swapping, overloaded) costs every
engine step the whole deadline and gives no tree for it: slower than plain decoding. After `miss_limit`
rounds missed in a row the replica is *lagging*: rounds no longer wait on it (its requests decode
plainly, or move to a replica that keeps pace). It is still asked, without waiting, one round at a time:
a probe, sent when the previous one has been answered. A hung replica thus holds one probe and piles up
nothing; a slow one keeps drafting and so keeps its catch-up work as small as in normal service. A
probe answered within the deadline makes the replica a full member again.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

log = logging.getLogger(__name__)


class Ask(enum.Enum):
    WAIT = "wait"  # ask, and wait for the trees until the deadline
    PROBE = "probe"  # lagging: ask without waiting, and time the answer
    SKIP = "skip"  # lagging, its last probe unanswered: do not ask


@dataclass(frozen=True)
class PacePolicy:
    miss_limit: int = 3  # rounds missed in a row before the engine stops waiting on a replica

    def __post_init__(self) -> None:
        if self.miss_limit < 1:
            raise ValueError("miss_limit must be at least 1")


@dataclass
class _Record:
    misses: int = 0
    probe_round: int | None = None  # the unanswered probe, if any
    probe_sent_s: float = 0.0


class ReplicaPace:
    """Per replica: the deadlines it missed in a row, and its probe. Not thread-safe: the owner calls
    it under its lock."""

    def __init__(self, policy: PacePolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._records: dict[Hashable, _Record] = {}

    def lagging(self, replica: Hashable) -> bool:
        record = self._records.get(replica)
        return record is not None and record.misses >= self.policy.miss_limit

    def ask(self, replica: Hashable) -> Ask:
        if not self.lagging(replica):
            return Ask.WAIT
        return Ask.SKIP if self._records[replica].probe_round is not None else Ask.PROBE

    def probe_sent(self, replica: Hashable, round_number: int) -> None:
        record = self._records.get(replica)
        if record is not None:
            record.probe_round, record.probe_sent_s = round_number, self._clock()

    def replied(self, replica: Hashable, round_number: int, deadline_s: float, name: str) -> None:
        """A reply no round waited for: if it answers the replica's probe, time it."""
        record = self._records.get(replica)
        if record is None or record.probe_round != round_number:
            return
        record.probe_round = None
        if self._clock() - record.probe_sent_s <= deadline_s:
            self.answered(replica, name)

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
        log.warning(
            "drafter replica %s missed the draft deadline %d rounds in a row: not waiting on it, probing it"
            " until it keeps pace",
            name,
            record.misses,
        )
        return True

    def forget(self, replica: Hashable) -> None:
        """The replica went away: a new stream starts with a clean record."""
        self._records.pop(replica, None)

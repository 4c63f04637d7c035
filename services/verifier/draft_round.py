"""One propose round in flight: which replica owes which trees, and what came back in time."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass, field

from treespec.v1 import drafter_pb2


@dataclass
class PendingRound:
    """Filled by the replicas' reader threads under the owner's lock; `done` is set once every
    replica asked has answered (or gone away), so the engine waits no longer than it must."""

    number: int
    owed: dict[Hashable, set[str]]  # replica -> the request ids asked of it
    results: dict[str, drafter_pb2.DraftResult] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    asked: frozenset[Hashable] = field(init=False)  # every replica asked (`owed` loses them as they answer)

    def __post_init__(self) -> None:
        self.asked = frozenset(self.owed)

    def late(self) -> list[Hashable]:
        """The replicas asked that have not answered (nor gone away)."""
        return list(self.owed)

    def accept(self, replica: Hashable, reply: drafter_pb2.DraftReply) -> bool:
        """False for a reply to another round (late: its step decoded plainly) or an unasked replica."""
        if reply.round != self.number or replica not in self.owed:
            return False
        asked = self.owed.pop(replica)
        for result in reply.results:
            if result.request_id in asked:
                self.results[result.request_id] = result
        self._check()
        return True

    def forget(self, replica: Hashable) -> None:
        """The replica went away: its requests get no tree this round."""
        self.owed.pop(replica, None)
        self._check()

    def _check(self) -> None:
        if not self.owed:
            self.done.set()

"""Which (context, continuation) pairs of a request's history go into the shared memory, and when.

A continuation start s is recorded once its `branch_length` tokens exist (or, at the end, with what
there is), under every context window w that fits before it. Only starts in the output are recorded,
unless prompts are learned from too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from treespec.drafter.ngram.memory import Observation


@dataclass
class ObservationCursor:
    next_start: int  # first continuation start not yet recorded
    min_window: int
    max_window: int
    branch_length: int

    def take(self, history: Sequence[int], final: bool) -> list[Observation]:
        """Observations that became complete (all remaining ones when `final`), advancing the cursor."""
        end = len(history) if final else len(history) - self.branch_length + 1
        out: list[Observation] = []
        for start in range(max(self.next_start, self.min_window), end):
            continuation = tuple(history[start : start + self.branch_length])
            for w in range(self.min_window, min(self.max_window, start) + 1):
                out.append((tuple(history[start - w : start]), continuation))
        self.next_start = max(self.next_start, end)
        return out

"""Speculation statistics per request and overall."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SpecStats:
    """Counts over verify steps (decode steps; the token sampled right after the prompt is not one).

    acceptance length = tokens committed per verify step, the bonus token included (1.0 without drafts).
    By depth d (1-based): how many steps drafted a node at depth d and how many accepted one.
    """

    verify_steps: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    committed_tokens: int = 0
    drafted_by_depth: list[int] = field(default_factory=list)
    accepted_by_depth: list[int] = field(default_factory=list)

    @property
    def acceptance_length(self) -> float:
        return self.committed_tokens / self.verify_steps if self.verify_steps else 0.0

    @property
    def acceptance_by_depth(self) -> list[float]:
        return [
            a / d if d else 0.0 for a, d in zip(self.accepted_by_depth, self.drafted_by_depth, strict=True)
        ]

    def record_step(self, tree_depth: int, num_drafted: int, accepted_depth: int, committed: int) -> None:
        self.verify_steps += 1
        self.drafted_tokens += num_drafted
        self.accepted_tokens += accepted_depth
        self.committed_tokens += committed
        _grow(self.drafted_by_depth, tree_depth)
        _grow(self.accepted_by_depth, tree_depth)
        for d in range(tree_depth):
            self.drafted_by_depth[d] += 1
        for d in range(accepted_depth):
            self.accepted_by_depth[d] += 1

    def merge(self, other: SpecStats) -> None:
        self.verify_steps += other.verify_steps
        self.drafted_tokens += other.drafted_tokens
        self.accepted_tokens += other.accepted_tokens
        self.committed_tokens += other.committed_tokens
        for mine, theirs in (
            (self.drafted_by_depth, other.drafted_by_depth),
            (self.accepted_by_depth, other.accepted_by_depth),
        ):
            _grow(mine, len(theirs))
            for d, n in enumerate(theirs):
                mine[d] += n

    def to_dict(self) -> dict[str, Any]:
        return {
            "verify_steps": self.verify_steps,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "committed_tokens": self.committed_tokens,
            "acceptance_length": self.acceptance_length,
            "acceptance_by_depth": self.acceptance_by_depth,
        }


def _grow(counts: list[int], size: int) -> None:
    counts.extend([0] * (size - len(counts)))

"""How likely a drafted node's children are, rank by rank: what one more level of a tree is worth.

A level's pass (a head pass, a draft model's forward) expands the frontier: the best nodes of the last
level. A child of a node of path probability p gets p * q, q its draft probability, and is kept only if
that pays for its verify row (tree_value.py). Before the pass its q is unknown, but a head's best child
tends to have about the same q from step to step on the same text (a confident head: 0.6; a head lost
on this text: 0.1), and the second, third ... child less. Each request keeps those averages, rank by
rank, over its recent expansions (the root's children, drafted every step, included), and its tree
grows a level only while the children it would add are expected to pay for their rows and the pass.

Counting the frontier's whole path probability instead (the most a level can add) overrated the
levels of a head whose best child is accepted about half the time (docs/eagle.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

NEW_WEIGHT = 0.02  # the newest expansion's weight in each rank's average (once 50 have been seen)


@dataclass
class ChildOdds:
    means: list[float] = field(default_factory=list)  # average draft probability by rank, best first
    counts: list[int] = field(default_factory=list)  # expansions seen at each rank

    def observe(self, logq: Sequence[float]) -> None:
        """One expanded node's children's draft log-probabilities, best first."""
        for rank, value in enumerate(logq):
            q = math.exp(value)
            if rank == len(self.means):
                self.means.append(q)
                self.counts.append(1)
                continue
            self.counts[rank] += 1
            weight = max(NEW_WEIGHT, 1.0 / self.counts[rank])
            self.means[rank] += weight * (q - self.means[rank])

    def level_gain(self, path_probs: Iterable[float], ranks: int, node_cost: float) -> float:
        """The tokens that expanding nodes of these path probabilities into `ranks` children each is
        expected to add: each child's expected path probability (its parent's times the average at its
        rank) less the cost of its verify row, where positive (a child below its row's cost is not
        kept). Before anything was observed: the nodes' whole path probability, the most they can add."""
        if not self.means:
            return sum(path_probs)
        odds = self.means[:ranks]
        return sum(max(0.0, p * q - node_cost) for p in path_probs for q in odds)

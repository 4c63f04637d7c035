"""What a verify row costs on this device: the basis for how many draft nodes are worth verifying.

A decoding forward costs about a fixed part (reading every weight once, per-step overheads) plus a
part per row. On a GPU at small batches the per-row part is near zero; on a CPU one row costs a few
percent of a step, so a node that will likely be rejected slows decoding down. On a CPU the first
extra row of a request also costs more than the later ones (its attention over the whole context turns
from one query into several, and its matrix products from vector into matrix ones): a fixed part per
tree. The engine measures the three parts as it starts, by timing forwards of 1, 2 and n rows over
scratch KV slots (before any request holds a block), refines them from its own decode steps while
serving (verify_cost_fit.py), and gives drafters the cost of one more node and of a tree at all,
relative to a request's share of a step (`TreeBudget.node_cost`, `TreeBudget.tree_cost`); drafters
keep nodes only while they pay for themselves (shared/drafting/tree_value.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from treespec.shared.model.attention.backend import AttentionBackend
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.forward_timing import time_forward
from treespec.shared.model.kv_cache import KVCache

PROBE_CONTEXT = 512  # cached tokens the probe forwards attend to (fewer if the pool is smaller)
PROBE_REPEATS = 5  # timed forwards per size, after one warm-up each; the median counts
PROBE_SIZES = 4  # multi-row forwards timed: 2 rows, the tree's and evenly between


@dataclass(frozen=True)
class VerifyCost:
    step_s: float  # a forward with one row
    row_s: float  # each further row
    tree_s: float = 0.0  # a request's first further row costs this on top of row_s

    def node_cost(self, batch_size: int) -> float:
        """One more tree node's cost, relative to a request's share of a step of `batch_size` decodes:
        row / ((step + (batch - 1) * row) / batch). It tends to 1 as the batch grows (every row then
        costs what a request's decoding row does), and to row / step for one request."""
        return self._share(self.row_s, batch_size)

    def tree_cost(self, batch_size: int) -> float:
        """A tree's fixed cost on top of its nodes', in the same unit as node_cost."""
        return self._share(self.tree_s, batch_size)

    def _share(self, seconds: float, batch_size: int) -> float:
        step = self.step_s + (batch_size - 1) * self.row_s
        return batch_size * seconds / step if step > 0 else 0.0

    def plain_share(self, batch_size: int, rows: int, trees: int) -> float:
        """What a forward of `batch_size` rows (plain decoding) takes of one of `rows` rows verifying
        `trees` trees: a uniform slowdown of the device leaves it as it is."""
        plain = self.step_s + (batch_size - 1) * self.row_s
        actual = self.step_s + (rows - 1) * self.row_s + trees * self.tree_s
        return plain / actual if actual > 0 else 1.0


@dataclass(frozen=True)
class FixedNodeCost:
    """Costs given by the operator (`--speculative-node-cost`, `--speculative-tree-cost`), whatever
    the batch."""

    cost: float
    tree: float = 0.0

    def node_cost(self, batch_size: int) -> float:
        return self.cost

    def tree_cost(self, batch_size: int) -> float:
        return self.tree

    def plain_share(self, batch_size: int, rows: int, trees: int) -> float:
        """As VerifyCost's, in a request's shares of a step: a draft row costs `cost` of one, a tree
        `tree`."""
        actual = batch_size + (rows - batch_size) * self.cost + trees * self.tree
        return batch_size / actual if actual > 0 else 1.0


def measure_verify_cost(
    model: CausalLM, backend: AttentionBackend, cache: KVCache, tree_nodes: int
) -> VerifyCost:
    """Times forwards of 1 row and of 2 up to `tree_nodes` rows (chains of scratch tokens after a cached
    context), in turn; the pool must be free (the probe writes garbage K/V into its first slots). A line
    through the multi-row forwards gives the cost per row; where it meets one row, above the one-row
    forward, is the tree's fixed part."""
    room = min(cache.num_blocks * cache.block_size, model.config.max_position_embeddings)
    rows = max(2, min(tree_nodes, room - 1))
    context = max(0, min(PROBE_CONTEXT, room - rows))
    sizes = sorted({1, *_tree_sizes(rows)})
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for repeat in range(PROBE_REPEATS + 1):
        for n in sizes:
            t = time_forward(model, backend, cache, context, n)
            if repeat > 0:  # the first round warms up
                times[n].append(t)
    step = statistics.median(times[1])
    trees = [(n, statistics.median(times[n])) for n in sizes if n > 1]
    if len(trees) == 1:  # one further row: no per-row part to tell a fixed part from
        return VerifyCost(step_s=step, row_s=max(0.0, trees[0][1] - step))
    row, at_one = _line(trees)
    if row < 0.0:
        row, at_one = 0.0, statistics.fmean(t for _, t in trees)
    return VerifyCost(step_s=step, row_s=row, tree_s=max(0.0, at_one - step))


def _tree_sizes(rows: int) -> list[int]:
    """Row counts the probe times for trees: 2, `rows` and about evenly between (at most PROBE_SIZES)."""
    count = min(PROBE_SIZES, rows - 1)
    return sorted({round(2 + i * (rows - 2) / max(1, count - 1)) for i in range(count)})


def _line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares through (rows, seconds): (seconds per row, the line's value at one row)."""
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return slope, mean_y - slope * (mean_x - 1.0)

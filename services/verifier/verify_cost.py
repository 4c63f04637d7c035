"""What a verify row costs on this device: the basis for how many draft nodes are worth verifying.

A decoding forward costs about a fixed part (reading every weight once, per-step overheads) plus a
part per row. On a GPU at small batches the per-row part is near zero; on a CPU one row costs a few
percent of a step, so a node that will likely be rejected slows decoding down. The engine measures
both parts as it starts, by timing forwards over scratch KV slots (before any request holds a block),
refines them from its own decode steps while serving (verify_cost_fit.py), and gives drafters the cost
of one more node relative to a request's share of a step (`TreeBudget.node_cost`); drafters keep a
node only while it pays for itself (shared/drafting/tree_value.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from treespec.shared.model.attention.backend import AttentionBackend
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.forward_timing import time_forward
from treespec.shared.model.kv_cache import KVCache

PROBE_CONTEXT = 512  # cached tokens the probe forwards attend to (fewer if the pool is smaller)
PROBE_REPEATS = 3  # timed forwards per size, after one warm-up each; the median counts


@dataclass(frozen=True)
class VerifyCost:
    step_s: float  # a forward with one row
    row_s: float  # each further row

    def node_cost(self, batch_size: int) -> float:
        """One more tree node's cost, relative to a request's share of a step of `batch_size` decodes:
        row / ((step + (batch - 1) * row) / batch). It tends to 1 as the batch grows (every row then
        costs what a request's decoding row does), and to row / step for one request."""
        step = self.step_s + (batch_size - 1) * self.row_s
        return batch_size * self.row_s / step if step > 0 else 0.0


@dataclass(frozen=True)
class FixedNodeCost:
    """A node cost given by the operator (`--speculative-node-cost`), whatever the batch."""

    cost: float

    def node_cost(self, batch_size: int) -> float:
        return self.cost


def measure_verify_cost(
    model: CausalLM, backend: AttentionBackend, cache: KVCache, tree_nodes: int
) -> VerifyCost:
    """Times forwards of 1 and `tree_nodes` rows (a chain of scratch tokens after a cached context),
    alternately; the pool must be free (the probe writes garbage K/V into its first slots)."""
    room = min(cache.num_blocks * cache.block_size, model.config.max_position_embeddings)
    rows = max(2, min(tree_nodes, room - 1))
    context = max(0, min(PROBE_CONTEXT, room - rows))
    one, many = [], []
    for repeat in range(PROBE_REPEATS + 1):
        t1 = time_forward(model, backend, cache, context, 1)
        tn = time_forward(model, backend, cache, context, rows)
        if repeat > 0:  # the first round warms up
            one.append(t1)
            many.append(tn)
    step, big = statistics.median(one), statistics.median(many)
    return VerifyCost(step_s=step, row_s=max(0.0, big - step) / (rows - 1))

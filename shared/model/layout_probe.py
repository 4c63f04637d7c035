"""Up to how many rows a forward should read the dense copies of the layer weights: measured at load.

On CPU in float32 the layer weights are packed for oneDNN, which handles the 2-16 rows of a verify
step in little more than the time of one; but on some CPUs torch.mm over the dense weights streams
them faster for one row or a few (linear.py). Which layout wins, and up to how many rows, depends on
the CPU, so the loader keeps both (when memory allows) and times whole forwards over a scratch KV
cache in each layout: the dense copies serve the row counts where they won, every smaller count
winning too; where they never win they are dropped.
"""

from __future__ import annotations

import logging
import os
import statistics

import torch

from treespec.shared.model.attention.layered import attention_backend
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.forward_timing import time_forward
from treespec.shared.model.kv_cache import KVCache
from treespec.shared.model.linear import dual_layouts
from treespec.shared.model.weights import ModelWeights

log = logging.getLogger(__name__)

PROBE_ROWS = (1, 2, 4, 8, 16)  # row counts tried in turn, while the dense copies keep winning
PROBE_CONTEXT = 256  # cached tokens the probe forwards attend to
PROBE_REPEATS = 3  # timed forwards per layout and row count, after one warm-up; the median counts
MEMORY_SHARE = 0.25  # the dense copies are kept only if they take at most this share of the RAM
BLOCK = 16


def dense_copies_fit(weights: ModelWeights) -> bool:
    """Whether a second copy of the (still dense) layer weights takes at most MEMORY_SHARE of the
    machine's RAM."""
    size = sum(
        w.numel() * w.element_size()
        for layer in weights.layers
        for w in layer.matmuls()
        if isinstance(w, torch.Tensor)
    )
    return size <= MEMORY_SHARE * _physical_memory()


def choose_dense_rows(model: CausalLM) -> int:
    """The largest probed row count up to which forwards over the dense copies were faster than over
    the packed weights (0: never). Leaves the layouts set to nothing dense; `set_dense_rows` applies."""
    layouts = dual_layouts(model.weights)
    sizes = [r for r in PROBE_ROWS if r < model.config.max_position_embeddings]
    if not layouts or not sizes:
        return 0
    context = max(0, min(PROBE_CONTEXT, model.config.max_position_embeddings - sizes[-1]))
    blocks = -(-(context + sizes[-1]) // BLOCK)
    cache = KVCache.allocate(model.config, blocks, BLOCK, model.dtype, model.device)
    backend = attention_backend(model.config)
    chosen = 0
    for rows in sizes:
        dense, packed = [], []
        for repeat in range(PROBE_REPEATS + 1):
            for layout in layouts:
                layout.max_dense_rows = rows
            t_dense = time_forward(model, backend, cache, context, rows)
            for layout in layouts:
                layout.max_dense_rows = 0
            t_packed = time_forward(model, backend, cache, context, rows)
            if repeat > 0:  # the first round warms up
                dense.append(t_dense)
                packed.append(t_packed)
        if statistics.median(dense) >= statistics.median(packed):
            break
        chosen = rows
    log.info("dense layer weights serve forwards of at most %d rows (measured)", chosen)
    return chosen


def _physical_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")

"""Timing one forward of a few rows after a cached context, over scratch KV slots.

The verifier's verify-cost probe (services/verifier/verify_cost.py) and the CPU weight-layout probe
(layout_probe.py) both measure the device this way. The forward writes garbage K/V into the cache's
first `context + rows` slots: the pool must hold no request's blocks yet.
"""

from __future__ import annotations

import time

import torch

from treespec.shared.model.attention.backend import AttentionBackend
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.kv_cache import KVCache


def time_forward(
    model: CausalLM, backend: AttentionBackend, cache: KVCache, context: int, rows: int
) -> float:
    """Seconds for one forward of `rows` new tokens (a chain, verified as a tree when rows > 1) after
    `context` cached ones, with logits for every row, as a verify step computes them."""
    device = model.device
    parents = torch.arange(rows) - 1 if rows > 1 else None
    layout = BatchLayout(
        [
            SequenceLayout(
                context, torch.arange(context + rows), torch.arange(context, context + rows), parents
            )
        ]
    )
    plan = backend.plan(layout, device)
    ids = torch.zeros(rows, dtype=torch.long, device=device)
    positions = layout.positions().to(device)
    logits_rows = torch.arange(rows, device=device)
    _synchronize(device)
    start = time.perf_counter()
    model.forward(ids, positions, backend, plan, cache, logits_rows)
    _synchronize(device)
    return time.perf_counter() - start


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)

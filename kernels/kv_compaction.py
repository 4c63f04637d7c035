"""KV compaction: after verification, move the accepted tree nodes' K/V to consecutive positions.

Tree nodes were written to scratch slots in node order; the accepted path (root excluded) skips the
rejected siblings, so its K/V rows must be copied to the request's next logical positions before the
scratch slots are released.
"""

from __future__ import annotations

import torch


def compact_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, src_slots: torch.Tensor, dst_slots: torch.Tensor
) -> None:
    """Copy every layer's K and V rows from src_slots to dst_slots, in place.

    k_cache, v_cache: [num_layers, num_slots, kv_heads, head_dim] (the flat-slot view of a block
      pool; K and V may differ in head_dim). src_slots, dst_slots: LongTensor[m] on the caches'
      device; dst_slots must be distinct (with duplicates the surviving row would be arbitrary).
    Overlapping src and dst are safe: all rows are gathered into a copy before any is written.
    """
    if src_slots.shape != dst_slots.shape or src_slots.dim() != 1:
        raise ValueError(
            f"src_slots {tuple(src_slots.shape)} and dst_slots {tuple(dst_slots.shape)}: not equal 1-D"
        )
    if src_slots.numel() == 0:
        return
    for cache in (k_cache, v_cache):
        rows = cache.index_select(1, src_slots)
        cache.index_copy_(1, dst_slots, rows)

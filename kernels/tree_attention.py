"""CPU float32 attention for the few new rows of decode and verify steps (cpu/tree_attention.cpp),
read straight from the paged KV cache.

A decode step attends 1 row per request, a verify step a draft tree's 2-32 rows, each over the whole
cached context: torch's SDPA first gathers (or views) the keys head by head and takes a dense mask,
and spends most of its time on the keys it streams in small blocks. The kernel reads every key and
value once where it lies in the pool, scores all of a KV head's queries (its query heads and rows
side by side, GQA) against it, and applies the tree's mask only on the new tokens. `treespec bench
layout --context 800` times whole forwards with it and with SDPA (docs/benchmarks.md: 24.6 against
27.2 ms for one row of SmolLM2-135M on a 2-core AMD EPYC, 29.3 against 31.9 ms for eight).

A query's result depends only on the keys it sees (masked keys add exact zeros, the key chunks lie at
fixed positions), so a row's result does not depend on the other rows, and a verified chain's row
equals the decode row with the same inputs bit for bit. The
reference is SDPA with the same mask (`reference_attend`). The kernel is built once per machine
(kernels/cpu_extension.py); where it cannot be, `tree_attention()` returns None and the attention
backend keeps SDPA.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from treespec.kernels.cpu_extension import load_cpu_kernels
from treespec.kernels.speed_check import fast_enough

HEAD_DIMS = (16, 32, 64, 128, 256)
MAX_QUERIES = 128  # rows x query heads per KV head (kMaxQueries in the source)
MAX_ROWS = 32  # new rows per sequence the attention backend sends here (prefill chunks go to SDPA)


@dataclass(frozen=True)
class RowSequence:
    """One sequence's part: its rows in the forward, its cached prefix and its new tokens' mask."""

    row_start: int  # its first row among the forward's T
    cached_len: int
    kv_slots: torch.Tensor  # [cached_len + num_new] long: flat KV slot of every position
    new_mask: torch.Tensor  # [num_new, num_new] bool: which new tokens each new row sees

    @property
    def num_new(self) -> int:
        return int(self.new_mask.shape[0])


@dataclass(frozen=True)
class RowAttentionPlan:
    """The kernel's inputs for a group of sequences, built once per forward."""

    sequences: torch.Tensor  # [B, 5] long: row_start, num_new, cached_len, slot offset, mask offset
    slots: torch.Tensor  # every sequence's kv slots, concatenated
    masks: torch.Tensor  # every sequence's new_mask, flattened and concatenated (bool)
    max_new: int

    @classmethod
    def of(cls, sequences: Sequence[RowSequence]) -> RowAttentionPlan:
        table, slot_offset, mask_offset = [], 0, 0
        for s in sequences:
            table.append([s.row_start, s.num_new, s.cached_len, slot_offset, mask_offset])
            slot_offset += int(s.kv_slots.shape[0])
            mask_offset += s.num_new * s.num_new
        return cls(
            torch.tensor(table, dtype=torch.long),
            torch.cat([s.kv_slots.long() for s in sequences]),
            torch.cat([s.new_mask.flatten() for s in sequences]).contiguous(),
            max(s.num_new for s in sequences),
        )


@dataclass(frozen=True)
class TreeAttention:
    """The built kernel."""

    module: Any

    def fits(self, q: torch.Tensor, k_flat: torch.Tensor, plan: RowAttentionPlan) -> bool:
        """Whether the kernel takes these shapes and dtypes (else SDPA)."""
        heads, kv_heads, head_dim = q.shape[1], k_flat.shape[1], q.shape[2]
        return self.fits_shapes(q.dtype, k_flat.dtype, q.device, heads, kv_heads, head_dim, plan)

    @staticmethod
    def fits_shapes(
        q_dtype: torch.dtype,
        kv_dtype: torch.dtype,
        device: torch.device,
        heads: int,
        kv_heads: int,
        head_dim: int,
        plan: RowAttentionPlan,
    ) -> bool:
        """`fits` for queries and keys of these dtypes and shapes."""
        return (
            q_dtype == torch.float32
            and kv_dtype == torch.float32
            and device.type == "cpu"
            and head_dim in HEAD_DIMS
            and heads % kv_heads == 0
            and plan.max_new * (heads // kv_heads) <= MAX_QUERIES
        )

    def attend(
        self, q: torch.Tensor, k_flat: torch.Tensor, v_flat: torch.Tensor, plan: RowAttentionPlan
    ) -> torch.Tensor:
        """q [T, heads, head_dim] (the forward's), k_flat and v_flat [slots, kv_heads, head_dim] ->
        [sum num_new, heads * head_dim], the plan's sequences' rows in order."""
        if q.stride(2) != 1:
            q = q.contiguous()
        out: torch.Tensor = self.module.attend(
            q, k_flat, v_flat, plan.sequences, plan.slots, plan.masks, q.shape[2] ** -0.5
        )
        return out


def reference_attend(
    q: torch.Tensor, k_flat: torch.Tensor, v_flat: torch.Tensor, sequences: Sequence[RowSequence]
) -> torch.Tensor:
    """SDPA per sequence over its gathered keys, the cached prefix whole and the new tokens masked."""
    outs = []
    for s in sequences:
        n = s.num_new
        mask = torch.ones(n, s.cached_len + n, dtype=torch.bool)
        mask[:, s.cached_len :] = s.new_mask
        keys = k_flat[s.kv_slots].transpose(0, 1)[None]
        values = v_flat[s.kv_slots].transpose(0, 1)[None]
        queries = q[s.row_start : s.row_start + n].transpose(0, 1)[None]
        out = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=mask[None, None], enable_gqa=True
        )
        outs.append(out[0].transpose(0, 1).flatten(1))
    return torch.cat(outs)


@functools.lru_cache(maxsize=1)
def tree_attention() -> TreeAttention | None:
    """The kernel, built on first use, or None where it cannot be built or runs slower than SDPA on this
    CPU (speed_check.py)."""
    kernel = build_tree_attention()
    return kernel if kernel is not None and _fast_enough(kernel) else None


def build_tree_attention() -> TreeAttention | None:
    """The kernel however fast it runs (its tests), or None where it cannot be built."""
    module = load_cpu_kernels()
    return None if module is None else TreeAttention(module)


def _fast_enough(kernel: TreeAttention) -> bool:
    """A verify step's attention: 4 rows after 512 cached tokens in SmolLM2's shapes (9 query heads, 3
    KV heads of 64) with the keys scattered over the pool, against SDPA over the gathered keys."""
    generator = torch.Generator().manual_seed(0)
    heads, kv_heads, head_dim, cached, rows = 9, 3, 64, 512, 4
    slots = 2 * (cached + rows)
    q = torch.randn(rows, heads, head_dim, generator=generator)
    k = torch.randn(slots, kv_heads, head_dim, generator=generator)
    v = torch.randn(slots, kv_heads, head_dim, generator=generator)
    mask = torch.tril(torch.ones(rows, rows, dtype=torch.bool))
    sequences = [RowSequence(0, cached, torch.randperm(slots, generator=generator)[: cached + rows], mask)]
    plan = RowAttentionPlan.of(sequences)
    return fast_enough(
        "tree_attention", lambda: kernel.attend(q, k, v, plan), lambda: reference_attend(q, k, v, sequences)
    )

"""CPU float32 causal attention for prefill chunks (cpu/prefill_attention.cpp), read straight from the
paged KV cache.

A prompt's chunk attends hundreds of new rows, each over the cached prefix and the chunk's rows up to
its own. torch's SDPA on a CPU took it at 90-130 GFLOP/s on a 2-core AMD EPYC with AVX-512, a quarter
of the rate of the forward's matmuls, so attention was a third of a 750-token prompt's prefill and half
of a 1,500-token one's. The kernel works flash attention's way with the queries in vector lanes: each
work item is one query head's tile of 32 rows, walking the keys they see in blocks of 64 (scores, the
online softmax's running max and sum, the weighted sum of V), with the causal mask applied only in the
blocks that reach past the tile's first row. It reads every key and value where it lies in the pool,
by slot, so a fragmented pool needs no gather.

Each row's result depends only on the keys it sees, not on the rows beside it. The reference is SDPA
with the causal mask over the gathered keys (`reference_attend`). The kernel is built once per
machine (kernels/cpu_extension.py); where it cannot be, or is slower than SDPA on this CPU,
`prefill_attention()` returns None and the attention backend keeps SDPA.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from treespec.kernels.cpu_extension import load_cpu_kernels
from treespec.kernels.speed_check import fast_enough
from treespec.kernels.tree_attention import RowSequence
from treespec.kernels.tree_attention import reference_attend as masked_reference

HEAD_DIMS = (16, 32, 64, 128, 256)


@dataclass(frozen=True)
class PrefillSequence:
    """One sequence's chunk: its rows in the forward, its cached prefix and every position's slot."""

    row_start: int  # its first row among the forward's T
    cached_len: int
    kv_slots: torch.Tensor  # [cached_len + num_new] long: flat KV slot of every position

    @property
    def num_new(self) -> int:
        return int(self.kv_slots.shape[0]) - self.cached_len


@dataclass(frozen=True)
class PrefillAttentionPlan:
    """The kernel's inputs for a group of chunks, built once per forward."""

    sequences: torch.Tensor  # [B, 4] long: row_start, num_new, cached_len, slot offset
    slots: torch.Tensor  # every sequence's kv slots, concatenated

    @classmethod
    def of(cls, sequences: Sequence[PrefillSequence]) -> PrefillAttentionPlan:
        table, slot_offset = [], 0
        for s in sequences:
            table.append([s.row_start, s.num_new, s.cached_len, slot_offset])
            slot_offset += int(s.kv_slots.shape[0])
        return cls(torch.tensor(table, dtype=torch.long), torch.cat([s.kv_slots.long() for s in sequences]))


@dataclass(frozen=True)
class PrefillAttention:
    """The built kernel."""

    module: Any

    @staticmethod
    def fits(q: torch.Tensor, k_flat: torch.Tensor) -> bool:
        """Whether the kernel takes these shapes and dtypes (else SDPA)."""
        heads, head_dim = q.shape[1], q.shape[2]
        return (
            q.dtype == torch.float32
            and k_flat.dtype == torch.float32
            and q.device.type == "cpu"
            and head_dim in HEAD_DIMS
            and heads % k_flat.shape[1] == 0
        )

    def attend(
        self, q: torch.Tensor, k_flat: torch.Tensor, v_flat: torch.Tensor, plan: PrefillAttentionPlan
    ) -> torch.Tensor:
        """q [T, heads, head_dim] (the forward's), k_flat and v_flat [slots, kv_heads, head_dim] ->
        [sum num_new, heads * head_dim], the plan's sequences' rows in order."""
        if q.stride(2) != 1:
            q = q.contiguous()
        out: torch.Tensor = self.module.prefill_attend(
            q, k_flat, v_flat, plan.sequences, plan.slots, q.shape[2] ** -0.5
        )
        return out


def reference_attend(
    q: torch.Tensor, k_flat: torch.Tensor, v_flat: torch.Tensor, sequences: Sequence[PrefillSequence]
) -> torch.Tensor:
    """SDPA per sequence over its gathered keys, the cached prefix whole and the new rows causal: the
    row kernel's reference with each chunk's causal mask."""
    causal = [
        RowSequence(
            s.row_start, s.cached_len, s.kv_slots, torch.ones(s.num_new, s.num_new, dtype=torch.bool).tril()
        )
        for s in sequences
    ]
    return masked_reference(q, k_flat, v_flat, causal)


@functools.lru_cache(maxsize=1)
def prefill_attention() -> PrefillAttention | None:
    """The kernel, built on first use, or None where it cannot be built or runs slower than SDPA on this
    CPU (speed_check.py)."""
    kernel = build_prefill_attention()
    return kernel if kernel is not None and _fast_enough(kernel) else None


def build_prefill_attention() -> PrefillAttention | None:
    """The kernel however fast it runs (its tests), or None where it cannot be built."""
    module = load_cpu_kernels()
    return None if module is None else PrefillAttention(module)


def _fast_enough(kernel: PrefillAttention) -> bool:
    """A prompt's second chunk: 128 rows after 256 cached tokens in SmolLM2's shapes (9 query heads, 3
    KV heads of 64), the keys in one run of slots, against SDPA over them with the causal mask."""
    generator = torch.Generator().manual_seed(0)
    heads, kv_heads, head_dim, cached, rows = 9, 3, 64, 256, 128
    q = torch.randn(rows, heads, head_dim, generator=generator)
    k = torch.randn(cached + rows, kv_heads, head_dim, generator=generator)
    v = torch.randn(cached + rows, kv_heads, head_dim, generator=generator)
    sequences = [PrefillSequence(0, cached, torch.arange(cached + rows))]
    plan = PrefillAttentionPlan.of(sequences)
    return fast_enough(
        "prefill_attention",
        lambda: kernel.attend(q, k, v, plan),
        lambda: reference_attend(q, k, v, sequences),
    )

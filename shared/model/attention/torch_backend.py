"""Attention on any device: gather each request's K/V, dense masks, torch SDPA.

Sequences are attended in groups of similar query and key lengths (powers of two), one SDPA call
per group, so that a long prefill chunk in a batch of decodes does not pad every decode to its length.
On a CPU in float32, groups of decode tokens and draft trees (at most MAX_ROWS new rows a sequence)
go to the own row kernel instead (kernels/tree_attention.py), and prefill chunks (longer chains) to the
own prefill kernel (kernels/prefill_attention.py); both read K/V where they lie in the pool. Whatever
the kernels do not take (longer trees, chains past a sliding window, other devices and dtypes) stays
with SDPA.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch
import torch.nn.functional as F

from treespec.kernels.prefill_attention import (
    PrefillAttention,
    PrefillAttentionPlan,
    PrefillSequence,
    prefill_attention,
)
from treespec.kernels.tree_attention import (
    MAX_ROWS,
    RowAttentionPlan,
    RowSequence,
    TreeAttention,
    tree_attention,
)
from treespec.kernels.tree_mask import ancestor_mask
from treespec.shared.model.attention.backend import AttentionBackend
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.attention.softcap import softcapped_attention
from treespec.shared.model.kv_cache import KVCache


@dataclass(frozen=True)
class GroupPlan:
    """Sequences attended in one SDPA call, padded to the group's longest query and key lengths."""

    token_rows: torch.Tensor | slice  # the group's rows among the forward's T tokens (one sequence: a slice)
    kv_index: torch.Tensor  # [B, max_kv] flat slots to gather (padding: slot 0, masked out)
    mask: torch.Tensor | None  # [B, 1, max_q, max_kv] bool, None when every query sees every key
    q_rows: torch.Tensor | None  # [B, max_q] forward row of each padded query (None: one sequence)
    out_rows: torch.Tensor | None  # [n] padded flat row holding each of the group's token outputs
    kv_range: tuple[int, int] | None = None  # one sequence whose slots are one run: a view, no gather
    rows: RowAttentionPlan | None = None  # the row kernel's inputs, where it may take the group
    # One chain with nothing cached before it (a prompt's first chunk): SDPA's own causal masking,
    # which skips the blocks above the diagonal instead of computing and masking them (mask is None).
    causal: bool = False
    prefill: PrefillAttentionPlan | None = None  # the prefill kernel's inputs, where it may take the group


@dataclass(frozen=True)
class TorchAttentionPlan:
    write_slots: torch.Tensor  # [T] flat slot of each new token
    groups: tuple[GroupPlan, ...]


class TorchAttentionBackend(AttentionBackend):
    def __init__(
        self,
        sliding_window: int | None = None,
        row_kernel: bool = True,
        prefill_kernel: bool = True,
        softcap: float | None = None,
    ) -> None:
        """`row_kernel`: send decode and tree rows on a CPU to the own kernel where it builds;
        `prefill_kernel`: prefill chunks likewise to theirs; `softcap`: Gemma 2's attention logit
        soft-capping (the scores pass through cap * tanh(score / cap); torch attends, not the kernels)."""
        self.sliding_window = sliding_window
        self.row_kernel = row_kernel and softcap is None
        self.prefill_kernel = prefill_kernel and softcap is None
        self.softcap = softcap
        self._causal: dict[int, torch.Tensor] = {}  # chain length -> lower-triangular mask

    def plan(self, layout: BatchLayout, device: torch.device) -> TorchAttentionPlan:
        seqs = layout.sequences
        starts = list(accumulate((s.num_new for s in seqs), initial=0))
        buckets: dict[tuple[int, int], list[int]] = {}
        for i, s in enumerate(seqs):
            buckets.setdefault((_bucket(s.num_new), _bucket(s.kv_len)), []).append(i)
        groups = tuple(
            self._group_plan([seqs[i] for i in members], [starts[i] for i in members], device)
            for members in buckets.values()
        )
        return TorchAttentionPlan(layout.write_slots().to(device), groups)

    def attend(
        self,
        plan: TorchAttentionPlan,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cache: KVCache,
    ) -> torch.Tensor:
        k_flat, v_flat = cache.layer(layer)
        k_flat.index_copy_(0, plan.write_slots, k)
        v_flat.index_copy_(0, plan.write_slots, v)
        if len(plan.groups) == 1:
            return self._attend_group(plan.groups[0], q, k_flat, v_flat)
        out = q.new_empty(q.shape[0], q.shape[1] * q.shape[2])
        for group in plan.groups:
            out[group.token_rows] = self._attend_group(group, q, k_flat, v_flat)
        return out

    def _attend_group(
        self, group: GroupPlan, q: torch.Tensor, k_flat: torch.Tensor, v_flat: torch.Tensor
    ) -> torch.Tensor:
        if group.prefill is not None:
            prefill = self._prefill_kernel(q.device)
            if prefill is not None and prefill.fits(q, k_flat):
                return prefill.attend(q, k_flat, v_flat, group.prefill)
        kernel = self._kernel(q.device)
        if group.rows is not None and kernel is not None and kernel.fits(q, k_flat, group.rows):
            return kernel.attend(q, k_flat, v_flat, group.rows)
        return _sdpa_group(group, q, k_flat, v_flat, self.softcap)

    def row_kernel_plan(
        self, plan: TorchAttentionPlan, dtype: torch.dtype, cache: KVCache, heads: int
    ) -> RowAttentionPlan | None:
        """The row kernel's plan where it attends the whole step, as `attend` would send it (one group,
        not a prefill, the kernel built and taking these shapes); else None."""
        if len(plan.groups) != 1:
            return None
        group = plan.groups[0]
        device = plan.write_slots.device
        if group.prefill is not None or group.rows is None or self._kernel(device) is None:
            return None
        kv_heads, head_dim = cache.k.shape[3], cache.k.shape[4]
        fits = TreeAttention.fits_shapes(dtype, cache.k.dtype, device, heads, kv_heads, head_dim, group.rows)
        return group.rows if fits else None

    def _kernel(self, device: torch.device) -> TreeAttention | None:
        return tree_attention() if self.row_kernel and device.type == "cpu" else None

    def _prefill_kernel(self, device: torch.device) -> PrefillAttention | None:
        return prefill_attention() if self.prefill_kernel and device.type == "cpu" else None

    def _prefill_plan(
        self, seqs: list[SequenceLayout], starts: list[int], device: torch.device
    ) -> PrefillAttentionPlan | None:
        """The prefill kernel's inputs for a group of chains longer than the row kernel takes, within
        the sliding window, on a CPU; None where another path attends."""
        if max(s.num_new for s in seqs) <= MAX_ROWS or any(s.tree_parents is not None for s in seqs):
            return None
        window = self.sliding_window
        if window is not None and max(s.kv_len for s in seqs) > window:
            return None
        if self._prefill_kernel(device) is None:
            return None
        return PrefillAttentionPlan.of(
            [PrefillSequence(start, s.cached_len, s.kv_slots) for s, start in zip(seqs, starts, strict=True)]
        )

    def _rows_plan(
        self, seqs: list[SequenceLayout], starts: list[int], masks: list[torch.Tensor], device: torch.device
    ) -> RowAttentionPlan | None:
        """The row kernel's inputs for a group of decodes and trees on a CPU; None where SDPA attends."""
        if max(s.num_new for s in seqs) > MAX_ROWS or self._kernel(device) is None:
            return None
        window = self.sliding_window
        if window is not None and max(s.kv_len for s in seqs) > window:
            return None
        return RowAttentionPlan.of(
            [
                RowSequence(start, s.cached_len, s.kv_slots, m[:, s.cached_len :].contiguous())
                for s, start, m in zip(seqs, starts, masks, strict=True)
            ]
        )

    def _group_plan(self, seqs: list[SequenceLayout], starts: list[int], device: torch.device) -> GroupPlan:
        """`starts`: each sequence's first row among the forward's tokens."""
        prefill = self._prefill_plan(seqs, starts, device)
        if len(seqs) == 1 and self._plain_causal(seqs[0]):
            s = seqs[0]
            rows = slice(starts[0], starts[0] + s.num_new)
            slots = s.kv_slots
            return GroupPlan(
                rows, slots[None].to(device), None, None, None, _as_range(slots), causal=True, prefill=prefill
            )
        masks = [self._sequence_mask(s) for s in seqs]
        kernel_rows = self._rows_plan(seqs, starts, masks, device)
        if len(seqs) == 1:
            only = masks[0]
            mask = None if bool(only.all()) else only[None, None].to(device)
            slots = seqs[0].kv_slots
            rows = slice(starts[0], starts[0] + seqs[0].num_new)
            return GroupPlan(
                rows, slots[None].to(device), mask, None, None, _as_range(slots), kernel_rows, prefill=prefill
            )
        max_q = max(s.num_new for s in seqs)
        max_kv = max(s.kv_len for s in seqs)
        kv_index = torch.zeros(len(seqs), max_kv, dtype=torch.long)
        mask_pad = torch.zeros(len(seqs), 1, max_q, max_kv, dtype=torch.bool)
        # Padded query rows attend to slot 0 only, so that no softmax row is empty (their output is dropped).
        mask_pad[:, :, :, 0] = True
        q_rows = torch.zeros(len(seqs), max_q, dtype=torch.long)
        for b, (s, m, start) in enumerate(zip(seqs, masks, starts, strict=True)):
            n = s.num_new
            kv_index[b, : s.kv_len] = s.kv_slots
            mask_pad[b, 0, :n, : s.kv_len] = m
            q_rows[b, :n] = torch.arange(start, start + n)
        # The group's tokens in order: row b * max_q + j of the padded output is sequence b's token j.
        valid = torch.arange(max_q)[None, :] < torch.tensor([s.num_new for s in seqs])[:, None]
        token_rows = q_rows[valid].to(device)
        out_rows = valid.flatten().nonzero().squeeze(1).to(device)
        mask = None if bool(mask_pad.all()) else mask_pad.to(device)
        return GroupPlan(
            token_rows,
            kv_index.to(device),
            mask,
            q_rows.to(device),
            out_rows,
            rows=kernel_rows,
            prefill=prefill,
        )

    def _plain_causal(self, s: SequenceLayout) -> bool:
        """A chain from position 0, longer than the row kernel takes, within the sliding window: each
        token attends to itself and every token before it, which is SDPA's is_causal (aligned top-left,
        which is right when nothing is cached before the chain)."""
        within_window = self.sliding_window is None or s.kv_len <= self.sliding_window
        return s.tree_parents is None and s.cached_len == 0 and s.num_new > MAX_ROWS and within_window

    def _causal_mask(self, n: int) -> torch.Tensor:
        mask = self._causal.get(n)
        if mask is None:
            mask = self._causal[n] = torch.ones(n, n, dtype=torch.bool).tril()
        return mask

    def _sequence_mask(self, s: SequenceLayout) -> torch.Tensor:
        """[num_new, kv_len] bool: the cached prefix, then a causal or ancestor mask over new tokens."""
        n = s.num_new
        mask = torch.ones(n, s.kv_len, dtype=torch.bool)
        if s.tree_parents is None:
            mask[:, s.cached_len :] = self._causal_mask(n)
        else:
            mask[:, s.cached_len :] = ancestor_mask(s.tree_parents.cpu())
        if self.sliding_window is not None and s.kv_len > self.sliding_window:
            key_pos = torch.cat([torch.arange(s.cached_len), s.positions.cpu()])
            mask &= (s.positions.cpu()[:, None] - key_pos[None, :]) < self.sliding_window
        return mask


def _sdpa_group(
    group: GroupPlan,
    q: torch.Tensor,
    k_flat: torch.Tensor,
    v_flat: torch.Tensor,
    softcap: float | None = None,
) -> torch.Tensor:
    """q: [T, heads, head_dim], the whole forward's -> [n, heads * head_dim] for the group's tokens
    (SDPA; with `softcap`, softcapped_attention's own softmax)."""
    if group.kv_range is not None:
        start, end = group.kv_range
        keys = k_flat[start:end][None].transpose(1, 2)
        values = v_flat[start:end][None].transpose(1, 2)
        queries = q[group.token_rows][None].transpose(1, 2)  # one sequence: a slice, no copy
    elif group.q_rows is None:  # one sequence: no padding, and index_select is the cheaper gather
        keys = k_flat.index_select(0, group.kv_index[0])[None].transpose(1, 2)
        values = v_flat.index_select(0, group.kv_index[0])[None].transpose(1, 2)
        queries = q[group.token_rows][None].transpose(1, 2)
    else:
        shape = (*group.kv_index.shape, *k_flat.shape[1:])  # [B, max_kv, kv_heads, head_dim]
        flat_index = group.kv_index.flatten()  # index_select gathers faster than advanced indexing
        keys = k_flat.index_select(0, flat_index).view(shape).transpose(1, 2)
        values = v_flat.index_select(0, flat_index).view(shape).transpose(1, 2)
        queries = q[group.q_rows].transpose(1, 2)
    if softcap is not None:
        out = softcapped_attention(queries, keys, values, group.mask, group.causal, softcap)
    else:
        out = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=group.mask, is_causal=group.causal, enable_gqa=True
        )
    out = out.transpose(1, 2)  # [B, max_q, heads, head_dim]
    if group.out_rows is None:
        return out[0].flatten(1)
    return out.flatten(0, 1)[group.out_rows].flatten(1)


def _bucket(n: int) -> int:
    """The power of two at or above n: sequences in one bucket pad each other at most twofold."""
    return 1 << max(0, n - 1).bit_length()


def _as_range(slots: torch.Tensor) -> tuple[int, int] | None:
    """(start, end) when the slots are start, start + 1, ..., end - 1."""
    start = int(slots[0])
    end = start + int(slots.shape[0])
    if int(slots[-1]) != end - 1 or not torch.equal(slots, torch.arange(start, end)):
        return None
    return start, end

"""Reference attention on any device: gather each request's K/V, dense masks, torch SDPA."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from treespec.kernels.tree_mask import ancestor_mask
from treespec.shared.model.attention.backend import AttentionBackend
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.kv_cache import KVCache


@dataclass(frozen=True)
class TorchAttentionPlan:
    write_slots: torch.Tensor  # [T] flat slot of each new token
    kv_index: torch.Tensor  # [B, max_kv] flat slots to gather (padding: slot 0, masked out)
    mask: torch.Tensor | None  # [B, 1, max_q, max_kv] bool, None when every query sees every key
    q_rows: torch.Tensor | None  # [B, max_q] token row of each padded query (None: one sequence, no padding)
    out_rows: torch.Tensor | None  # [T] flat padded row holding each token's output
    kv_range: tuple[int, int] | None = None  # one sequence whose slots are one run: a view, no gather


class TorchAttentionBackend(AttentionBackend):
    def __init__(self, sliding_window: int | None = None) -> None:
        self.sliding_window = sliding_window
        self._causal: dict[int, torch.Tensor] = {}  # chain length -> lower-triangular mask

    def plan(self, layout: BatchLayout, device: torch.device) -> TorchAttentionPlan:
        seqs = layout.sequences
        masks = [self._sequence_mask(s) for s in seqs]
        write_slots = layout.write_slots().to(device)
        if len(seqs) == 1:
            only = masks[0]
            mask = None if bool(only.all()) else only[None, None].to(device)
            slots = seqs[0].kv_slots
            kv_range = _as_range(slots)
            return TorchAttentionPlan(write_slots, slots[None].to(device), mask, None, None, kv_range)
        max_q = max(s.num_new for s in seqs)
        max_kv = max(s.kv_len for s in seqs)
        kv_index = torch.zeros(len(seqs), max_kv, dtype=torch.long)
        mask_pad = torch.zeros(len(seqs), 1, max_q, max_kv, dtype=torch.bool)
        # Padded query rows attend to slot 0 only, so that no softmax row is empty (their output is dropped).
        mask_pad[:, :, :, 0] = True
        q_rows = torch.zeros(len(seqs), max_q, dtype=torch.long)
        out_rows = torch.empty(layout.num_tokens, dtype=torch.long)
        start = 0
        for b, (s, m) in enumerate(zip(seqs, masks, strict=True)):
            n = s.num_new
            kv_index[b, : s.kv_len] = s.kv_slots
            mask_pad[b, 0, :n, : s.kv_len] = m
            q_rows[b, :n] = torch.arange(start, start + n)
            out_rows[start : start + n] = torch.arange(b * max_q, b * max_q + n)
            start += n
        return TorchAttentionPlan(
            write_slots, kv_index.to(device), mask_pad.to(device), q_rows.to(device), out_rows.to(device)
        )

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
        if plan.kv_range is not None:
            start, end = plan.kv_range
            keys = k_flat[start:end][None].transpose(1, 2)
            values = v_flat[start:end][None].transpose(1, 2)
            queries = q[None].transpose(1, 2)
        elif plan.q_rows is None:  # one sequence: no padding, and index_select is the cheaper gather
            keys = k_flat.index_select(0, plan.kv_index[0])[None].transpose(1, 2)
            values = v_flat.index_select(0, plan.kv_index[0])[None].transpose(1, 2)
            queries = q[None].transpose(1, 2)
        else:
            keys = k_flat[plan.kv_index].transpose(1, 2)  # [B, kv_heads, max_kv, head_dim]
            values = v_flat[plan.kv_index].transpose(1, 2)
            queries = q[plan.q_rows].transpose(1, 2)
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=plan.mask, enable_gqa=True)
        out = out.transpose(1, 2)  # [B, max_q, heads, head_dim]
        if plan.out_rows is None:
            return out[0].flatten(1)
        return out.flatten(0, 1)[plan.out_rows].flatten(1)

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


def _as_range(slots: torch.Tensor) -> tuple[int, int] | None:
    """(start, end) when the slots are start, start + 1, ..., end - 1."""
    start = int(slots[0])
    end = start + int(slots.shape[0])
    if int(slots[-1]) != end - 1 or not torch.equal(slots, torch.arange(start, end)):
        return None
    return start, end

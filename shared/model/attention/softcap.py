"""Attention with Gemma 2's logit soft-capping: each score q.k / sqrt(d) passes through
cap * tanh(score / cap) before the mask and the softmax (in float32), as transformers computes it."""

from __future__ import annotations

import math

import torch


def softcapped_attention(
    queries: torch.Tensor,  # [B, heads, q, d]
    keys: torch.Tensor,  # [B, kv_heads, k, d]
    values: torch.Tensor,  # [B, kv_heads, k, d]
    mask: torch.Tensor | None,  # [B, 1, q, k] bool: which keys each query sees; None: all
    causal: bool,  # a chain from position 0 (q == k): each query sees itself and the keys before it
    softcap: float,
) -> torch.Tensor:  # [B, heads, q, d]
    groups = queries.shape[1] // keys.shape[1]
    keys = keys.repeat_interleave(groups, dim=1)
    values = values.repeat_interleave(groups, dim=1)
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    scores = torch.tanh(scores / softcap) * softcap
    if causal:
        n = scores.shape[-1]
        mask = torch.ones(n, n, dtype=torch.bool, device=scores.device).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(values.dtype)
    return probs @ values

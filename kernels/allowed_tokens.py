"""Structured output's mask on a tree's rows: tokens the grammar does not allow after a row's path
get probability 0. The mask is the same rule plain decoding applies token by token, so verification
stays lossless."""

from __future__ import annotations

import torch


def mask_disallowed(rows: torch.Tensor, allowed: torch.Tensor, unadjusted: torch.Tensor) -> torch.Tensor:
    """rows: [n, V] logits after the request's other rules; allowed: [n, V] bool; unadjusted: the
    same rows before those rules. Disallowed tokens go to -inf. Where the other rules left no allowed
    token finite (min_tokens holds back EOS where the grammar needs it to end), the grammar wins:
    that row is the unadjusted one, masked."""
    out = rows.float().masked_fill(~allowed.to(rows.device), float("-inf"))
    dead = torch.isneginf(out).all(dim=-1)
    if bool(dead.any()):
        fallback = unadjusted.float().masked_fill(~allowed.to(rows.device), float("-inf"))
        out = torch.where(dead[:, None], fallback, out)
    return out

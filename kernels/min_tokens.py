"""vLLM's `min_tokens`: no stop token (EOS, or the request's stop token ids) before that many output
tokens. A tree row at depth d predicts output token number `num_output + d`, so the rule holds per row,
and verification stays lossless."""

from __future__ import annotations

import torch

from treespec.kernels.tree_mask import tree_depths


def forbid_early_stops(
    logits: torch.Tensor, parents: torch.Tensor, num_output: int, min_tokens: int, stop_ids: list[int]
) -> torch.Tensor:
    """logits: [n, V], a tree's rows (node 0 predicts output token number `num_output`). Returns the
    rows with the stop tokens at -inf where the token they predict comes before `min_tokens`."""
    if num_output >= min_tokens or not stop_ids:
        return logits
    early = (num_output + tree_depths(parents.to(logits.device))) < min_tokens
    out = logits.float().clone()
    ids = torch.tensor(stop_ids, dtype=torch.long, device=out.device)
    rows = early.nonzero(as_tuple=True)[0]
    out[rows[:, None], ids[None, :]] = float("-inf")
    return out

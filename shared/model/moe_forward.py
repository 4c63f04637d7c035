"""A sparse mixture-of-experts block's forward: a router picks each token's top-k experts, whose
SwiGLU MLPs' outputs are summed weighted by the router's probabilities.

The maths of HF transformers' blocks: softmax over every expert's logit (in float32), the top k
kept, renormalized to sum to one where the model says so (Mixtral always; Qwen3-MoE with
`norm_topk_prob`), then each expert runs once on the rows routed to it, experts in index order; a
shared expert (Qwen2-MoE) on every row, scaled by its sigmoid gate, is added last.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from treespec.shared.model.linear import linear
from treespec.shared.model.moe import MoeConfig
from treespec.shared.model.weights import ExpertWeights, MlpWeights


def moe_forward(
    block: ExpertWeights,
    x: torch.Tensor,
    config: MoeConfig,
    mlp: Callable[[MlpWeights, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """x [T, hidden] -> [T, hidden]: each row through its top-k experts (`mlp(expert, rows)`)."""
    probs = torch.softmax(linear(x, block.router).float(), dim=-1)
    weights, chosen = torch.topk(probs, config.top_k, dim=-1)  # [T, k]
    if config.normalize_top_k:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(x.dtype)
    out = torch.zeros_like(x)
    for expert in torch.unique(chosen).tolist():
        rows, slot = torch.where(chosen == expert)
        y = mlp(block.experts[expert], x[rows]) * weights[rows, slot, None]
        out.index_add_(0, rows, y)
    if block.shared is not None and block.shared_gate is not None:  # Qwen2-MoE's shared expert
        out = out + torch.sigmoid(linear(x, block.shared_gate)) * mlp(block.shared, x)
    return out

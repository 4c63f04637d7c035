"""Sparse mixture-of-experts feed-forward layers (Qwen3-MoE, Qwen2-MoE, Mixtral): which layers have them, how
many experts a token takes, and where a checkpoint keeps them (the forward: moe_forward.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MoeNames:
    """Where a family's checkpoint keeps a sparse block's tensors, under `model.layers.{i}.`."""

    block: str  # the block's prefix
    gate: str  # each expert's gate projection (up and down follow)
    up: str
    down: str


MOE_NAMES = {
    "qwen3_moe": MoeNames("mlp.", "gate_proj", "up_proj", "down_proj"),
    "qwen2_moe": MoeNames("mlp.", "gate_proj", "up_proj", "down_proj"),
    "mixtral": MoeNames("block_sparse_moe.", "w1", "w3", "w2"),
}


@dataclass(frozen=True)
class MoeConfig:
    num_experts: int
    top_k: int
    expert_intermediate_size: int
    normalize_top_k: bool  # renormalize the kept probabilities to sum to one
    sparse_layers: frozenset[int]  # the layers with a sparse block (the others: a dense MLP)
    names: MoeNames
    # Qwen2-MoE: an expert every token takes too (`mlp.shared_expert`), its output scaled by a
    # sigmoid gate of its own (`mlp.shared_expert_gate`); 0: none.
    shared_intermediate_size: int = 0

    @classmethod
    def from_raw(cls, raw: dict[str, Any], family: str, num_layers: int) -> MoeConfig | None:
        """The family's sparse blocks, or None for a dense family."""
        if family == "mixtral":
            return cls(
                num_experts=int(raw["num_local_experts"]),
                top_k=int(raw["num_experts_per_tok"]),
                expert_intermediate_size=int(raw["intermediate_size"]),
                normalize_top_k=True,
                sparse_layers=frozenset(range(num_layers)),
                names=MOE_NAMES[family],
            )
        if family in ("qwen3_moe", "qwen2_moe"):
            experts = int(raw.get("num_experts") or raw.get("num_local_experts") or 0)
            step = int(raw.get("decoder_sparse_step", 1))
            dense = {int(i) for i in raw.get("mlp_only_layers") or ()}
            sparse = {i for i in range(num_layers) if i not in dense and experts > 0 and (i + 1) % step == 0}
            return cls(
                num_experts=experts,
                top_k=int(raw["num_experts_per_tok"]),
                expert_intermediate_size=int(raw["moe_intermediate_size"]),
                normalize_top_k=bool(raw.get("norm_topk_prob", False)),
                sparse_layers=frozenset(sparse),
                names=MOE_NAMES[family],
                shared_intermediate_size=int(raw.get("shared_expert_intermediate_size") or 0)
                if family == "qwen2_moe"
                else 0,
            )
        return None

    def step_weights(self, hidden: int) -> int:
        """Weights one token multiplies by in a sparse block: the router, its top-k experts and a shared
        expert with its gate."""
        routed = hidden * self.num_experts + self.top_k * 3 * hidden * self.expert_intermediate_size
        shared = hidden + 3 * hidden * self.shared_intermediate_size if self.shared_intermediate_size else 0
        return routed + shared

"""Rotary position embeddings, looked up per token so that tree nodes get positions by depth (applied by
kernels/row_ops.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AutoConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from treespec.shared.model.config import ModelConfig
from treespec.shared.model.errors import ModelLoadError


@dataclass(frozen=True)
class RopeTables:
    """cos/sin for every position: [max_positions, head_dim] each (float32, model device)."""

    cos: torch.Tensor
    sin: torch.Tensor

    def lookup(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for the given positions [T] -> [T, 1, head_dim] (broadcast over heads)."""
        return self.cos[positions].unsqueeze(1).to(dtype), self.sin[positions].unsqueeze(1).to(dtype)


def build_rope_tables(config: ModelConfig, device: torch.device) -> RopeTables:
    inv_freq, scaling = _inv_freq(config)
    positions = torch.arange(config.max_position_embeddings, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq.float())
    emb = torch.cat((freqs, freqs), dim=-1)
    return RopeTables(cos=(emb.cos() * scaling).to(device), sin=(emb.sin() * scaling).to(device))


def _inv_freq(config: ModelConfig) -> tuple[torch.Tensor, float]:
    params = config.raw.get("rope_parameters") or config.raw.get("rope_scaling") or {}
    rope_type = params.get("rope_type") or params.get("type") or "default"
    if rope_type == "default":
        theta = float(params.get("rope_theta") or config.raw.get("rope_theta", 10000.0))
        dims = torch.arange(0, config.head_dim, 2, dtype=torch.float32)
        return 1.0 / (theta ** (dims / config.head_dim)), 1.0
    if rope_type == "dynamic" or rope_type not in ROPE_INIT_FUNCTIONS:
        raise ModelLoadError(f"unsupported rope type {rope_type!r}")
    # Scaled variants (llama3, yarn, linear, longrope): transformers owns the formulas.
    raw = {k: v for k, v in config.raw.items() if k != "model_type"}
    hf_config = AutoConfig.for_model(config.raw["model_type"], **raw)
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](hf_config, torch.device("cpu"))
    return inv_freq, float(scaling)

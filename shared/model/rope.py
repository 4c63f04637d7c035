"""Rotary position embeddings, looked up per token so that tree nodes get positions by depth (applied by
kernels/row_ops.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class LayerRopes:
    """Each layer's tables: one set for most models; Gemma 3's sliding and global layers differ."""

    tables: tuple[RopeTables, ...]
    layer_table: tuple[int, ...]  # per layer: its index in `tables`

    def lookup(self, positions: torch.Tensor, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(cos, sin) of every table for the given positions (RopeTables.lookup)."""
        return [table.lookup(positions, dtype) for table in self.tables]


def build_rope_tables(config: ModelConfig, device: torch.device) -> RopeTables:
    params = config.raw.get("rope_parameters") or config.raw.get("rope_scaling") or {}
    return _tables(config, params, device)


def build_layer_ropes(config: ModelConfig, device: torch.device) -> LayerRopes:
    """The model's tables, one per kind of layer where its layers differ (config.layer_types)."""
    if not config.layer_types:
        return LayerRopes((build_rope_tables(config, device),), (0,) * config.num_layers)
    kinds = sorted(set(config.layer_types))
    # transformers reads each kind's parameters however the config spells them (a rope_parameters
    # entry per kind, or rope_theta and rope_scaling beside rope_local_base_freq), or one set for all
    # kinds (Gemma 2).
    parameters = _hf_config(config).rope_parameters
    tables = tuple(
        _tables(config, dict(parameters[kind]), device, kind)
        if kind in parameters
        else _tables(config, dict(parameters), device)
        for kind in kinds
    )
    return LayerRopes(tables, tuple(kinds.index(kind) for kind in config.layer_types))


def _tables(
    config: ModelConfig, params: dict[str, Any], device: torch.device, layer_type: str | None = None
) -> RopeTables:
    """cos/sin over the rotated dims (config.rotary_dim) of every position. LongRoPE (Phi-3.5, Phi-4
    mini) rotates positions below its original context with its short factors and the later ones with
    its long factors, as transformers does for a sequence decoded past that length."""
    positions = torch.arange(config.max_position_embeddings, dtype=torch.float32)
    inv_freq, scaling = _inv_freq(config, params, layer_type)
    freqs = torch.outer(positions, inv_freq.float())
    if _rope_type(params) == "longrope":
        original = int(_hf_config(config).rope_parameters["original_max_position_embeddings"])
        long_inv_freq, _ = _inv_freq(config, params, layer_type, seq_len=original + 1)
        freqs[original:] = torch.outer(positions[original:], long_inv_freq.float())
    emb = torch.cat((freqs, freqs), dim=-1)
    return RopeTables(cos=(emb.cos() * scaling).to(device), sin=(emb.sin() * scaling).to(device))


def _rope_type(params: dict[str, Any]) -> str:
    return str(params.get("rope_type") or params.get("type") or "default")


def _inv_freq(
    config: ModelConfig, params: dict[str, Any], layer_type: str | None, seq_len: int | None = None
) -> tuple[torch.Tensor, float]:
    rope_type = _rope_type(params)
    if rope_type == "default":
        theta = float(params.get("rope_theta") or config.raw.get("rope_theta", 10000.0))
        dims = torch.arange(0, config.rotary_dim, 2, dtype=torch.float32)
        return 1.0 / (theta ** (dims / config.rotary_dim)), 1.0
    if rope_type == "dynamic" or rope_type not in ROPE_INIT_FUNCTIONS:
        raise ModelLoadError(f"unsupported rope type {rope_type!r}")
    # Scaled variants (llama3, yarn, linear, longrope): transformers owns the formulas.
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](
        _hf_config(config), torch.device("cpu"), seq_len=seq_len, layer_type=layer_type
    )
    return inv_freq, float(scaling)


def _hf_config(config: ModelConfig) -> Any:
    raw = {k: v for k, v in config.raw.items() if k != "model_type"}
    return AutoConfig.for_model(config.raw["model_type"], **raw)

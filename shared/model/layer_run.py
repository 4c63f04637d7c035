"""The decoder layers of a decode or verify step in one call to the own kernels (cpu/decode_layers.cpp).

CausalLM.forward's layer loop calls a kernel per step of a layer from Python: a norm, a product, the
rotary embedding, the KV write, the attention, and so on, each through a few Python frames. For the
few rows of a decode or verify step on a CPU that Python costs about a twelfth of the forward
(about 17 us a layer: 0.5 ms of a 5.9 ms one-row forward of SmolLM2-135M with its exact weight
forms, `treespec bench layout`). Where a model and a step take exactly the kernels the loop would
take (panel weights without biases or q/k norms, the row kernels built and fast enough here, one
row-attention group), the loop runs in C++ instead: the same kernels on the same tensors in the same
order, so the same results bit for bit (tested against the loop). Anything else (prefill chunks, SDPA
groups, other devices or dtypes, other weights) keeps the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from treespec.kernels.panel_gemm import PANEL, PanelWeight
from treespec.kernels.row_ops import row_ops
from treespec.kernels.tree_attention import RowAttentionPlan, tree_attention
from treespec.shared.model.config import ModelConfig
from treespec.shared.model.kv_cache import KVCache
from treespec.shared.model.weights import LayerWeights, MlpWeights, ModelWeights

PANELS, SCALED_PANELS, BLOCKS = 0, 1, 2  # a product's weight form (decode_layers.cpp)
NO_SCALES = torch.empty(0)


@dataclass(frozen=True)
class LayerRun:
    """A model's layers as the C++ loop takes them, and the weights they were taken from."""

    module: Any  # the CPU kernels' module
    tensors: list[torch.Tensor]  # 10 a layer (decode_layers.cpp)
    forms: list[int]  # 4 a layer
    weights: tuple[object, ...]  # every layer's matmul weights, to tell a repacked model

    @classmethod
    def of(cls, config: ModelConfig, weights: ModelWeights) -> LayerRun | None:
        """The model's run, or None where its layers are not what the C++ loop computes exactly."""
        ops, attention = row_ops(), tree_attention()
        if ops is None or attention is None or not _plain_config(config) or not weights.layers:
            return None
        tensors: list[torch.Tensor] = []
        forms: list[int] = []
        for layer in weights.layers:
            if not _plain_layer(layer):
                return None
            assert layer.input_norm is not None and layer.post_attention_norm is not None
            tensors += [layer.input_norm.contiguous(), layer.post_attention_norm.contiguous()]
            for weight in layer.matmuls():
                assert isinstance(weight, PanelWeight)
                form, scales = _form(weight)
                tensors += [weight.panels, scales]
                forms.append(form)
        return cls(ops.module, tensors, forms, _matmuls(weights))

    def serves(self, weights: ModelWeights) -> bool:
        """Whether the model still holds the weights this run was taken from."""
        current = _matmuls(weights)
        if len(current) != len(self.weights):
            return False
        return all(a is b for a, b in zip(current, self.weights, strict=True))

    def run(
        self,
        h: torch.Tensor,
        layers: range,
        step: StepRows,
        cache: KVCache,
        config: ModelConfig,
    ) -> torch.Tensor:
        """Layers `layers` (a contiguous range) over the rows h [T, hidden]."""
        rows = step.rows
        out: torch.Tensor = self.module.decode_layers(
            h,
            layers.start,
            layers.stop,
            self.tensors,
            self.forms,
            step.cos,
            step.sin,
            cache.k,
            cache.v,
            step.write_slots,
            rows.sequences,
            rows.slots,
            rows.masks,
            config.num_heads,
            config.num_kv_heads,
            config.head_dim,
            config.rms_norm_eps,
            config.head_dim**-0.5,
        )
        return out


@dataclass(frozen=True)
class StepRows:
    """One step's inputs to the C++ loop besides the weights."""

    cos: torch.Tensor  # [T, head_dim], contiguous
    sin: torch.Tensor
    write_slots: torch.Tensor  # [T]: each new token's flat KV slot
    rows: RowAttentionPlan  # the one attention group's row-kernel plan


def _plain_config(config: ModelConfig) -> bool:
    """A model whose layers the C++ loop computes: SwiGLU after attention, RMSNorms, one rotary table
    turning whole heads in every layer, no q/k norms, no per-layer windows."""
    plain_rope = not config.nope_layers and config.rotary_dim == config.head_dim
    plain_blocks = not (config.norm_centered or config.parallel_blocks) and config.activation == "silu"
    return not (config.qk_norm or config.layer_types) and plain_rope and plain_blocks


def _plain_layer(layer: LayerWeights) -> bool:
    """Panel weights whose products come out at their width, no biases, float32 norms."""
    attn, mlp = layer.attn, layer.mlp
    if not isinstance(mlp, MlpWeights) or layer.attn_out_norm is not None or layer.mlp_out_norm is not None:
        return False  # a sparse block or sandwich norms: the Python loop
    if any(b is not None for b in (attn.qkv_bias, attn.o_bias, mlp.gate_up_bias, mlp.down_bias)):
        return False
    if attn.q_norm is not None or attn.k_norm is not None:
        return False
    norms = (layer.input_norm, layer.post_attention_norm)
    if any(n is None or n.dtype != torch.float32 or not n.is_cpu for n in norms):
        return False
    return all(
        isinstance(w, PanelWeight) and w.panels.shape[0] * PANEL == w.out_features for w in layer.matmuls()
    )


def _form(weight: PanelWeight) -> tuple[int, torch.Tensor]:
    if weight.block_scales is not None:
        return BLOCKS, weight.block_scales
    if weight.scales is not None:
        return SCALED_PANELS, weight.scales
    return PANELS, NO_SCALES


def _matmuls(weights: ModelWeights) -> tuple[object, ...]:
    return tuple(w for layer in weights.layers for w in layer.matmuls())

"""Matmuls of the forward pass, and a CPU layout that keeps them cheap for the few rows of a step.

A decode step multiplies 1 row, a verify step 2-16 rows (tree nodes) by every weight. MKL's sgemm
on plain [in, out] weights costs nearly twice as much for 2 rows as for 1, so a tree would cost
almost a full step per extra node. oneDNN with weights reordered once into its blocked layout
handles 1-16 rows in about the time of one (measured on the default model: an 8-node verify step
~1.5x a decode step instead of ~2.5x). Weights are therefore packed at load time on CPU in float32
when oneDNN is there; elsewhere (GPU, other dtypes) they stay dense [in, out] for torch.mm.

For a single row, though, the packed layout streams the weights more slowly than torch.mm over the
dense ones on some CPUs (on these 2 cores a whole decode step took ~38 ms packed, ~31 ms dense). The
layer weights can therefore be kept in both layouts (`DualLayout`): dense up to a row count that
layout_probe.py measures once at load, packed above.

Where the own panel kernel builds (treespec.kernels.panel_gemm; x86-64, a C++ compiler), both give way
to it: it streams the weights once for 1-16 rows, so a tree node costs a small fraction of what it
costs in either library layout, and a single row no more than torch.mm's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from treespec.kernels.panel_gemm import PanelGemm, PanelWeight, panel_linear
from treespec.shared.model.dual_layout import DualLayout, HeadWeight, Weight
from treespec.shared.model.weights import ModelWeights

log = logging.getLogger(__name__)

PACK_ROWS_HINT = 8  # rows oneDNN tunes the packed layout for: a typical verify step


def linear(x: torch.Tensor, weight: Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, in] @ weight (+ bias [out]); weight is dense [in, out], packed by `pack_weight`, both, or
    in the panel layout."""
    if isinstance(weight, PanelWeight):
        y = panel_linear(x, weight)
        return y if bias is None else y.add_(bias)
    if isinstance(weight, DualLayout):
        weight = weight.for_rows(x.shape[0])
    if weight.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return torch.mm(x, weight) if bias is None else torch.addmm(bias, x, weight)


def packing_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN's packed linear, checked once on a small matrix against torch.mm."""
    if device.type != "cpu" or dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return False
    try:
        generator = torch.Generator().manual_seed(0)
        dense = torch.randn(64, 48, generator=generator)
        x = torch.randn(3, 64, generator=generator)
        return bool(torch.allclose(linear(x, pack_weight(dense)), x @ dense, rtol=1e-4, atol=1e-4))
    except (RuntimeError, AttributeError) as exc:  # a torch build without these ops
        log.info("oneDNN weight packing unavailable, using torch.mm: %r", exc)
        return False


def pack_weight(dense: torch.Tensor) -> torch.Tensor:
    """[in, out] dense -> oneDNN's blocked layout (an opaque mkldnn tensor for `linear`)."""
    return torch.ops.mkldnn._reorder_linear_weight(dense.t().contiguous(), PACK_ROWS_HINT)


def pack_model_weights(weights: ModelWeights, keep_dense: bool = False) -> None:
    """Repack every matmul weight for oneDNN, in place, layer by layer (so that the dense copies go as
    we go, unless `keep_dense`: the layers' weights then become `DualLayout`s, dense for no rows until
    `set_dense_rows` says otherwise)."""

    def layer_weight(dense: torch.Tensor) -> Weight:
        return DualLayout(dense, pack_weight(dense)) if keep_dense else pack_weight(dense)

    _repack(weights, layer_weight, pack_weight)


def panel_model_weights(weights: ModelWeights, gemm: PanelGemm, exact_forms: bool = True) -> None:
    """Repack every matmul weight into the panel layout, in place, layer by layer; with `exact_forms`
    each in the narrowest form that holds it exactly (PanelGemm.pack_exact: the same results, fewer
    bytes to stream), else in the model's dtype."""
    pack = gemm.pack_exact if exact_forms else gemm.pack
    _repack(weights, pack, pack)


def _repack(
    weights: ModelWeights,
    layer_weight: Callable[[torch.Tensor], Weight],
    head_weight: Callable[[torch.Tensor], HeadWeight],
) -> None:
    """A tied embedding gets its own dense copy first (lookups cannot read a packed lm_head); then
    each layer's matmul weights and the lm_head are replaced by their repacked forms."""
    assert isinstance(weights.lm_head, torch.Tensor)
    if weights.embed is None:
        weights.embed = weights.lm_head.t().contiguous()

    def repack(dense: Weight) -> Weight:
        assert isinstance(dense, torch.Tensor)
        return layer_weight(dense)

    for layer in weights.layers:
        layer.map_matmuls(repack)
    weights.lm_head = head_weight(weights.lm_head)


def dual_layouts(weights: ModelWeights) -> list[DualLayout]:
    return [w for layer in weights.layers for w in layer.matmuls() if isinstance(w, DualLayout)]


def set_dense_rows(weights: ModelWeights, rows: int) -> None:
    """Forwards of at most `rows` rows use the dense copies; 0 drops them (packed only, memory freed)."""
    if rows > 0:
        for w in dual_layouts(weights):
            w.max_dense_rows = rows
        return
    for layer in weights.layers:
        layer.map_matmuls(_packed)


def _packed(weight: Weight) -> Weight:
    return weight.packed if isinstance(weight, DualLayout) else weight

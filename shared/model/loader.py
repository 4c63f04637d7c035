"""Load a Hugging Face model directory into the own forward pass."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from treespec.kernels import panel_gemm
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.config import ModelConfig
from treespec.shared.model.errors import ModelLoadError
from treespec.shared.model.layout_probe import choose_dense_rows, dense_copies_fit
from treespec.shared.model.linear import (
    pack_model_weights,
    packing_supported,
    panel_model_weights,
    set_dense_rows,
)
from treespec.shared.model.rope import build_layer_ropes
from treespec.shared.model.weights import load_weights

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class LoadOptions:
    device: str = "cpu"
    dtype: str = "auto"  # float32 on CPU, bfloat16 on GPU
    pack_weights: bool = True  # a packed layout where one applies (CPU float32), see linear.py
    # With packing: the own panel kernel's layout where it builds (kernels/panel_gemm.py); else, or
    # without this, oneDNN's.
    panel_weights: bool = True
    # With the panel kernel: each weight in the narrowest form that holds it exactly (4-bit or int8
    # blocks where it was imported from such a quantization, bfloat16 where every value is one; the
    # same results, bit for bit, from fewer bytes), else in the model's dtype.
    exact_forms: bool = True
    # With packing: also keep the dense layer weights for forwards of few rows where they are faster
    # (measured at load, layout_probe.py), if the copy takes at most a quarter of the RAM.
    dense_small_forwards: bool = True

    def torch_dtype(self) -> torch.dtype:
        if self.dtype == "auto":
            return torch.float32 if torch.device(self.device).type == "cpu" else torch.bfloat16
        if self.dtype not in DTYPES:
            raise ModelLoadError(f"unknown dtype {self.dtype!r}; choose auto, {', '.join(DTYPES)}")
        return DTYPES[self.dtype]


def load_model(path: Path, options: LoadOptions | None = None) -> CausalLM:
    options = options or LoadOptions()
    path = Path(path)
    if not path.is_dir():
        raise ModelLoadError(f"{path}: not a directory")
    config = ModelConfig.from_dir(path)
    device = torch.device(options.device)
    dtype = options.torch_dtype()
    weights = load_weights(path, config, dtype, device)
    dual = False
    panels = options.pack_weights and options.panel_weights and panel_gemm.applies(device, dtype)
    gemm = panel_gemm.panel_gemm() if panels else None
    if gemm is not None:
        panel_model_weights(weights, gemm, options.exact_forms)
    elif options.pack_weights and packing_supported(device, dtype):
        dual = options.dense_small_forwards and dense_copies_fit(weights)
        pack_model_weights(weights, keep_dense=dual)
    model = CausalLM(config, weights, build_layer_ropes(config, device))
    if dual:
        set_dense_rows(weights, choose_dense_rows(model))
    return model

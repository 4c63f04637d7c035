"""A CPU matmul weight kept in two layouts, picked per forward by its row count (see linear.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from treespec.kernels.panel_gemm import PanelWeight


@dataclass
class DualLayout:
    """Dense [in, out] for forwards of at most `max_dense_rows` rows, oneDNN-packed for more."""

    dense: torch.Tensor
    packed: torch.Tensor
    max_dense_rows: int = 0

    def for_rows(self, rows: int) -> torch.Tensor:
        return self.dense if rows <= self.max_dense_rows else self.packed


Weight = torch.Tensor | DualLayout | PanelWeight  # what the forward's matmuls accept
HeadWeight = torch.Tensor | PanelWeight  # the lm_head's: dense, oneDNN-packed or panels

"""The attention backend interface: plan once per forward, attend once per layer."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from treespec.kernels.tree_attention import RowAttentionPlan
from treespec.shared.model.attention.layout import BatchLayout
from treespec.shared.model.kv_cache import KVCache


class AttentionBackend(ABC):
    """Writes new K/V into the paged cache and attends each new token to what it may see.

    `plan` turns a BatchLayout into whatever the backend needs (masks, index tensors, a flashinfer
    wrapper's plan) once per forward, so that the per-layer `attend` stays cheap.
    """

    @abstractmethod
    def plan(self, layout: BatchLayout, device: torch.device) -> Any: ...

    @abstractmethod
    def attend(
        self,
        plan: Any,
        layer: int,
        q: torch.Tensor,  # [T, num_heads, head_dim]
        k: torch.Tensor,  # [T, num_kv_heads, head_dim]
        v: torch.Tensor,  # [T, num_kv_heads, head_dim]
        cache: KVCache,
    ) -> torch.Tensor:  # [T, num_heads * head_dim]
        ...

    def row_kernel_plan(
        self, plan: Any, dtype: torch.dtype, cache: KVCache, heads: int
    ) -> RowAttentionPlan | None:
        """The CPU row kernel's plan where every layer of this step would attend through it alone (then
        the layers may run in one call: shared/model/layer_run.py); None by default."""
        return None

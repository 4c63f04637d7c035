"""The model's attention backend: one TorchAttentionBackend, or one per sliding window where the layers'
windows differ (Gemma 3's sliding and global layers), each planned once per forward."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from treespec.shared.model.attention.backend import AttentionBackend
from treespec.shared.model.attention.layout import BatchLayout
from treespec.shared.model.attention.torch_backend import TorchAttentionBackend, TorchAttentionPlan
from treespec.shared.model.config import ModelConfig
from treespec.shared.model.kv_cache import KVCache


def attention_backend(config: ModelConfig) -> AttentionBackend:
    windows, softcap = config.layer_windows, config.attn_logit_softcapping
    if len(set(windows)) <= 1:
        return TorchAttentionBackend(windows[0] if windows else None, softcap=softcap)
    return LayeredAttentionBackend(windows, softcap)


@dataclass(frozen=True)
class LayeredPlan:
    plans: tuple[TorchAttentionPlan, ...]  # one per window


class LayeredAttentionBackend(AttentionBackend):
    """Each layer attends through the backend of its window (None: every earlier token)."""

    def __init__(self, windows: Sequence[int | None], softcap: float | None = None) -> None:
        kinds = sorted(set(windows), key=lambda w: (w is None, w or 0))
        self.backends = tuple(TorchAttentionBackend(window, softcap=softcap) for window in kinds)
        self._layer_backend = tuple(kinds.index(window) for window in windows)

    def plan(self, layout: BatchLayout, device: torch.device) -> LayeredPlan:
        return LayeredPlan(tuple(backend.plan(layout, device) for backend in self.backends))

    def attend(
        self,
        plan: LayeredPlan,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cache: KVCache,
    ) -> torch.Tensor:
        index = self._layer_backend[layer]
        return self.backends[index].attend(plan.plans[index], layer, q, k, v, cache)

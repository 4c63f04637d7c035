"""How a drafter that reads the target (EAGLE) reaches the target's tensors and its feature ring.

In process (`LocalTargetAccess`) the drafter uses the verifier's own embedding and lm_head and a ring
in the same memory. A co-located drafter process gets both through shared memory instead (see
shared/drafting/colocation.py); either way nothing is copied per step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from treespec.shared.drafting.features import FeatureRing, FeatureSpec
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.dual_layout import HeadWeight


@dataclass(frozen=True)
class TargetTensors:
    """The target's token embedding and output head, as an EAGLE head reads them."""

    embed: torch.Tensor  # [vocab, hidden] dense rows
    lm_head: HeadWeight  # for treespec.shared.model.linear.linear: dense [hidden, vocab] or packed
    num_layers: int
    hidden_size: int
    vocab_size: int
    step_weights: int  # weights one target forward step multiplies by (ModelConfig.step_weights)


class TargetAccess(ABC):
    @abstractmethod
    def tensors(self) -> TargetTensors: ...

    @abstractmethod
    def feature_ring(self, spec: FeatureSpec, capacity: int) -> FeatureRing:
        """The ring the verifier will publish `spec`'s features into (made on first call)."""


class LocalTargetAccess(TargetAccess):
    """The drafter runs inside the verifier process, beside `model`."""

    def __init__(self, model: CausalLM) -> None:
        self.model = model
        self._ring: FeatureRing | None = None

    def tensors(self) -> TargetTensors:
        w, c = self.model.weights, self.model.config
        if w.embed is not None:
            embed = w.embed
        else:  # tied and dense (repacking gives a tied embedding its own copy)
            assert isinstance(w.lm_head, torch.Tensor)
            embed = w.lm_head.t()
        return TargetTensors(embed, w.lm_head, c.num_layers, c.hidden_size, c.vocab_size, c.step_weights)

    def feature_ring(self, spec: FeatureSpec, capacity: int) -> FeatureRing:
        if self._ring is None or self._ring.spec != spec:
            self._ring = FeatureRing.allocate(spec, capacity, self.model.dtype, self.model.device)
        return self._ring

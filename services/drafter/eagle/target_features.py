"""EAGLE-3's default feature layers, and reading the target's features for whole sequences (training)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from treespec.shared.drafting.features import FeatureSpec
from treespec.shared.model.attention.layered import attention_backend
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.kv_cache import KVCache


def default_aux_layer_ids(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's default, as "output of layer id": the residual stream entering layers 2, L/2 and L-3
    (SGLang's choice). Shallow targets, where those coincide, get three distinct early layers."""
    ids = (1, num_layers // 2 - 1, num_layers - 4)
    if len(set(ids)) == 3 and min(ids) >= 0:
        return ids
    return tuple(range(-1, min(num_layers, 3) - 1))  # -1: the embedding output


@dataclass(frozen=True)
class SequenceFeatures:
    """Per position of one sequence: the features, the target's argmax for the next token and, when
    asked for, its `top_k` most likely next tokens with their probabilities (soft labels)."""

    features: torch.Tensor  # [n, spec.width]
    next_argmax: torch.Tensor  # [n] long
    top_ids: torch.Tensor | None = None  # [n, top_k] long
    top_probs: torch.Tensor | None = None  # [n, top_k] float

    def cpu(self) -> SequenceFeatures:
        """In host memory (what a dataset shard stores), off the GPU a reader may have run on."""
        return SequenceFeatures(
            self.features.cpu(),
            self.next_argmax.cpu(),
            None if self.top_ids is None else self.top_ids.cpu(),
            None if self.top_probs is None else self.top_probs.cpu(),
        )


class TargetFeatureReader:
    """Runs the target over whole token sequences (no speculation) and returns their features."""

    def __init__(self, model: CausalLM, spec: FeatureSpec, max_tokens: int = 4096, block: int = 16) -> None:
        self.model = model
        self.spec = spec
        self.block = block
        self.num_blocks = -(-max_tokens // block)
        self.cache = KVCache.allocate(model.config, self.num_blocks, block, model.dtype, model.device)
        self.backend = attention_backend(model.config)

    @property
    def max_tokens(self) -> int:
        return self.num_blocks * self.block

    def read(self, sequences: list[list[int]], top_k: int = 0) -> list[SequenceFeatures]:
        """One ragged forward over all `sequences` (their total length must fit `max_tokens`)."""
        total = sum(-(-len(s) // self.block) * self.block for s in sequences)
        if total > self.max_tokens:
            raise ValueError(f"{total} tokens do not fit the reader's {self.max_tokens}")
        layouts, first_block = [], 0
        for seq in sequences:
            n = len(seq)
            blocks = -(-n // self.block)
            slots = torch.arange(first_block * self.block, first_block * self.block + n)
            layouts.append(SequenceLayout(0, slots, torch.arange(n)))
            first_block += blocks
        layout = BatchLayout(layouts)
        device = self.model.device
        ids = torch.tensor([t for s in sequences for t in s], dtype=torch.long, device=device)
        rows = torch.arange(len(ids), device=device)
        plan = self.backend.plan(layout, device)
        out = self.model.forward(
            ids, layout.positions().to(device), self.backend, plan, self.cache, rows, self.spec.capture(rows)
        )
        features = self.spec.select(out.hidden, out.aux_hidden)
        argmax = out.logits.argmax(dim=-1)
        sizes = [len(s) for s in sequences]
        parts = [features.split(sizes), argmax.split(sizes)]
        if top_k:
            top = out.logits.topk(top_k, dim=-1)  # probabilities of the top k only, not of the vocabulary
            probs = (top.values - out.logits.logsumexp(dim=-1, keepdim=True)).exp()
            parts += [top.indices.split(sizes), probs.split(sizes)]
        return [SequenceFeatures(*p) for p in zip(*parts, strict=True)]

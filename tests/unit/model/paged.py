"""A minimal driver of the own forward over a paged cache, for model tests."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from treespec.shared.model.attention.layered import attention_backend
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.kv_cache import BlockAllocator, KVCache

BLOCK = 4


@dataclass
class Seq:
    blocks: list[int] = field(default_factory=list)
    cached: int = 0


@dataclass
class PagedDriver:
    model: CausalLM
    num_blocks: int = 256

    def __post_init__(self) -> None:
        self.cache = KVCache.allocate(
            self.model.config, self.num_blocks, BLOCK, self.model.dtype, self.model.device
        )
        self.alloc = BlockAllocator(self.num_blocks)
        self.backend = attention_backend(self.model.config)

    def layout(self, seq: Seq, n_new: int, parents: torch.Tensor | None = None) -> SequenceLayout:
        need = -(-(seq.cached + n_new) // BLOCK) - len(seq.blocks)
        if need > 0:
            seq.blocks += self.alloc.allocate(need)
        blocks = torch.tensor(seq.blocks)
        slots = (blocks[:, None] * BLOCK + torch.arange(BLOCK)).flatten()[: seq.cached + n_new]
        if parents is None:
            positions = torch.arange(seq.cached, seq.cached + n_new)
        else:
            depth = torch.zeros(n_new, dtype=torch.long)
            for i in range(1, n_new):
                depth[i] = depth[int(parents[i])] + 1
            positions = seq.cached + depth
        return SequenceLayout(seq.cached, slots, positions, parents)

    def forward(self, items: list[tuple[Seq, torch.Tensor, torch.Tensor | None]]) -> list[torch.Tensor]:
        """items: (seq, new token ids, tree parents or None) -> logits [n_new, vocab] per item."""
        layouts = [self.layout(s, len(ids), p) for s, ids, p in items]
        batch = BatchLayout(layouts)
        ids = torch.cat([ids for _, ids, _ in items])
        plan = self.backend.plan(batch, self.model.device)
        rows = torch.arange(len(ids))
        out = self.model.forward(ids, batch.positions(), self.backend, plan, self.cache, rows)
        for s, new, p in items:
            # A chain is committed; a tree is left as scratch (tests re-run from the same prefix).
            if p is None:
                s.cached += len(new)
        return list(out.logits.split([len(i) for _, i, _ in items]))

"""Step 3: one ragged forward over prefill chunks, plain decode tokens and draft trees."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from treespec.kernels.tree_mask import tree_depths
from treespec.shared.drafting.features import FeatureSpec
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.model.attention.backend import AttentionBackend
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.kv_cache import KVCache
from treespec.verifier.scheduler import ScheduledBatch
from treespec.verifier.state import RequestState


@dataclass(frozen=True)
class ForwardItem:
    """A request's part of the forward. `tree` is what gets verified (root included); a prefill chunk
    that does not finish the prompt has none and no logits rows."""

    state: RequestState
    num_new: int
    tree: TokenTree | None
    is_decode: bool
    logits_start: int
    kv_slots: torch.Tensor  # [kv_len + num_new] long: flat slot of each logical position
    tree_depth: int = 0  # depth of the deepest drafted node (0: no draft)
    token_start: int = 0  # first row of this item's tokens in the forward
    # Prompt log-probabilities: the chunk's rows that predict prompt tokens not yet read, as the
    # first prompt position they predict and how many; their logits rows come right before the tree's.
    prompt_target: int = 0
    prompt_rows: int = 0

    @property
    def prompt_logits_start(self) -> int:
        return self.logits_start - self.prompt_rows


@dataclass(frozen=True)
class ForwardResult:
    items: list[ForwardItem]
    logits: torch.Tensor  # [R, vocab] float32, rows in item order
    features: torch.Tensor | None = None  # [T, spec.width]: every token row, when a spec asked for them


def slots_of(blocks: list[int], num_slots: int, block_size: int) -> torch.Tensor:
    """Flat KV slot of each of the first `num_slots` logical positions of a block table."""
    table = torch.tensor(blocks, dtype=torch.long)
    return (table[:, None] * block_size + torch.arange(block_size)).flatten()[:num_slots]


@dataclass
class ForwardStage:
    model: CausalLM
    cache: KVCache
    backend: AttentionBackend

    def run(
        self, batch: ScheduledBatch, trees: dict[str, TokenTree], features: FeatureSpec | None = None
    ) -> ForwardResult:
        items: list[ForwardItem] = []
        layouts: list[SequenceLayout] = []
        ids: list[torch.Tensor] = []
        rows: list[torch.Tensor] = []
        num_tokens = num_rows = 0
        for item, layout, new_ids in self._prefills(batch) + self._decodes(batch, trees):
            if item.prompt_rows:  # rows of positions prompt_target - 1 ...
                first = num_tokens + (item.prompt_target - 1 - item.state.kv_len)
                rows.append(torch.arange(first, first + item.prompt_rows))
                num_rows += item.prompt_rows
            items.append(dataclasses.replace(item, logits_start=num_rows, token_start=num_tokens))
            layouts.append(layout)
            ids.append(new_ids)
            if item.tree is not None:
                n = item.tree.num_nodes
                rows.append(torch.arange(num_tokens + item.num_new - n, num_tokens + item.num_new))
                num_rows += n
            num_tokens += item.num_new
        device = self.model.device
        layout_all = BatchLayout(layouts)
        plan = self.backend.plan(layout_all, device)
        capture = None if features is None else features.capture(torch.arange(num_tokens, device=device))
        out = self.model.forward(
            torch.cat(ids).to(device),
            layout_all.positions().to(device),
            self.backend,
            plan,
            self.cache,
            torch.cat(rows).to(device) if rows else torch.empty(0, dtype=torch.long, device=device),
            capture,
        )
        published = None if features is None else features.select(out.hidden, out.aux_hidden)
        return ForwardResult(items, out.logits, published)

    def _prefills(self, batch: ScheduledBatch) -> list[tuple[ForwardItem, SequenceLayout, torch.Tensor]]:
        parts = []
        for work in batch.prefills:
            s = work.state
            new = torch.tensor(s.tokens[s.kv_len : s.kv_len + work.length], dtype=torch.long)
            # The chunk that finishes the known tokens gets the next token from its last row.
            tree = TokenTree.root_only(s.tokens[-1]) if work.completes_prompt else None
            slots = slots_of(s.blocks, s.kv_len + work.length, self.cache.block_size)
            positions = torch.arange(s.kv_len, s.kv_len + work.length)
            target, count = _prompt_rows(s, work.length)
            item = ForwardItem(s, work.length, tree, False, 0, slots, prompt_target=target, prompt_rows=count)
            parts.append((item, SequenceLayout(s.kv_len, slots, positions), new))
        return parts

    def _decodes(
        self, batch: ScheduledBatch, trees: dict[str, TokenTree]
    ) -> list[tuple[ForwardItem, SequenceLayout, torch.Tensor]]:
        parts = []
        for s in batch.decodes:
            tree = trees.get(s.request_id) or TokenTree.root_only(s.tokens[-1])
            n = tree.num_nodes
            slots = slots_of(s.blocks, s.kv_len + n, self.cache.block_size)
            depths = tree_depths(tree.parents) if n > 1 else torch.zeros(1, dtype=torch.long)
            item = ForwardItem(s, n, tree, True, 0, slots, int(depths.max()))
            layout = SequenceLayout(s.kv_len, slots, s.kv_len + depths, tree.parents if n > 1 else None)
            parts.append((item, layout, tree.tokens))
        return parts


def _prompt_rows(state: RequestState, length: int) -> tuple[int, int]:
    """The prompt positions whose tokens this chunk's rows predict (the row of position i predicts
    token i + 1) and that still need their log-probability: (first position, count)."""
    if state.request.sampling.prompt_logprobs is None:
        return 0, 0
    first = max(state.prompt_logprobs_upto, state.kv_len + 1)
    end = min(state.kv_len + length + 1, state.num_prompt)  # targets < end: predicted by this chunk
    return first, max(0, end - first)

"""The standalone drafter: a small causal LM of the target's family drafts dynamic token trees.

SGLang's `--speculative-algorithm STANDALONE`, vLLM's `draft_model` method. The draft model runs on
the same forward pass as the target (shared/model/causal_lm.py) over a paged KV cache of its own
(draft_cache.py), batched over the requests of each engine step:

1. Catch-up: one forward over every request's tokens not yet in its draft cache (the prompt, in
   chunks of `prefill_chunk`, then whatever the verifier committed); the last row gives the root's
   children. A prompt prefix the draft model read for an earlier request (the turns of a
   conversation, a system prompt) is found in its prefix cache and not read again.
2. Growth: EAGLE-2's dynamic tree (shared/drafting/tree_search.py): each level expands the `topk`
   best frontier nodes of every request in one forward, each node attending to the request's cache
   and its own ancestors' scratch K/V, while the children a level would add are expected to pay for
   a draft step (`level_cost`) and their verify rows (shared/drafting/child_odds.py).

It reads only token ids, so it runs in any drafter process: in the verifier's, or behind the drafter
server over gRPC. Trees carry draft probabilities, so sampling verification stays lossless.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from treespec.drafter.standalone.config import StandaloneConfig
from treespec.drafter.standalone.draft_cache import DraftCache, DraftSequence
from treespec.drafter.standalone.vocabulary import check_same_vocabulary
from treespec.shared.drafting.child_odds import ChildOdds
from treespec.shared.drafting.draft_pacing import DraftPacing
from treespec.shared.drafting.drafter import Drafter, DrafterContext, DraftQuery
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.drafting.tree_search import SearchTree, grow_levels, proposal, ranked_children
from treespec.shared.model.attention.layered import attention_backend
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.config import ModelConfig
from treespec.shared.model.loader import LoadOptions, load_model

log = logging.getLogger(__name__)


@dataclass
class _Request:
    """`tokens`: prompt + committed; the draft cache holds K/V of the first `seq.length` of them.
    `logprobs`: the draft model's next-token distribution after all of them (None while behind)."""

    tokens: list[int]
    seq: DraftSequence
    logprobs: torch.Tensor | None = None
    pacing: DraftPacing = field(default_factory=DraftPacing)
    child_odds: ChildOdds = field(default_factory=ChildOdds)  # what a level of its trees is worth

    @property
    def behind(self) -> int:
        return len(self.tokens) - self.seq.length


class StandaloneDrafter(Drafter):
    def __init__(self, model: CausalLM, config: StandaloneConfig, vocab_size: int, level_cost: float) -> None:
        self.model = model
        self.config = config
        self.vocab_size = min(vocab_size, model.config.vocab_size)  # ids both models have
        self.level_cost = level_cost
        self.cache = DraftCache(
            model.config,
            config.num_blocks,
            config.page_size,
            model.dtype,
            model.device,
            prefix_caching=config.prefix_caching,
        )
        self.backend = attention_backend(model.config)
        self._requests: dict[str, _Request] = {}
        self._generator = torch.Generator().manual_seed(config.seed) if config.draft_probs else None

    @classmethod
    def create(cls, context: DrafterContext) -> Drafter:
        config = StandaloneConfig.from_options(context.options)
        check_same_vocabulary(config.path, context.target_path)
        model = load_model(config.path, LoadOptions(config.device, config.dtype))
        if config.level_cost is not None:
            level_cost = config.level_cost
        elif context.target_path is not None:
            level_cost = model.config.step_weights / ModelConfig.from_dir(context.target_path).step_weights
        else:  # `treespec drafter --vocab-size N`: the target's size is unknown
            level_cost = 0.0
            log.warning("without the target's folder, every draft level is grown (option level_cost)")
        log.info("standalone drafter: %s, a draft level costs %.3f of a target step", config.path, level_cost)
        return cls(model, config, context.vocab_size, min(level_cost, 0.99))

    # ---- lifecycle --------------------------------------------------------------------------------

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        self.close(request_id)  # a reopen starts afresh
        self._requests[request_id] = _Request(list(prompt), self.cache.start(prompt, cache_salt))

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        request = self._requests.get(request_id)
        if request is None:
            return
        request.pacing.committed(tokens)
        request.tokens.extend(tokens)
        if tokens:
            request.logprobs = None

    def close(self, request_id: str) -> None:
        request = self._requests.pop(request_id, None)
        if request is not None:
            self.cache.release(request.seq)

    # ---- drafting ---------------------------------------------------------------------------------

    @torch.inference_mode()
    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        found = [self._requests.get(q.request_id) for q in queries]
        requests = [r if r is not None and r.pacing.drafts_now() else None for r in found]
        cost: dict[int, float] = {id(r): 0.0 for r in requests if r is not None}
        self._catch_up([r for r in requests if r is not None], cost)
        searches = [self._search(q, r) for q, r in zip(queries, requests, strict=True)]
        self._grow([(s, r) for s, r in zip(searches, requests, strict=True) if s is not None and r], cost)
        trees = [proposal(s, self._generator) for s in searches]
        for query, request, tree in zip(queries, requests, trees, strict=True):
            if request is not None:
                budget = query.budget
                request.pacing.drafted(tree, cost[id(request)], budget.tree_cost, budget.node_cost)
        return trees

    def _search(self, query: DraftQuery, request: _Request | None) -> SearchTree | None:
        """The tree search for a request that is caught up and has room for its scratch nodes."""
        budget = query.budget
        if request is None or request.logprobs is None or budget.num_draft_tokens < 2 or budget.num_steps < 1:
            return None
        length = request.seq.length
        if length + budget.num_steps > self.model.config.max_position_embeddings:
            return None
        if not self.cache.reserve(request.seq, length + budget.topk * (budget.num_steps - 1)):
            return None
        search = SearchTree(request.tokens[-1], budget, self.config.min_path_prob, request.child_odds)
        search.add_children(0, request.logprobs, None)
        return search

    def _catch_up(self, requests: list[_Request], cost: dict[int, float]) -> None:
        """One forward over every request's tokens not yet in its draft cache (at most prefill_chunk a
        request); a request that has read all of them gets its next-token distribution."""
        work: list[tuple[_Request, int]] = []
        for request in requests:
            n = min(request.behind, self.config.prefill_chunk)
            if (
                n > 0
                and self._fits(request.seq.length + n)
                and self.cache.reserve(request.seq, request.seq.length + n)
            ):
                work.append((request, n))
        if not work:
            return
        sequences, ids = [], []
        for request, n in work:
            cost[id(request)] += self.level_cost / len(work)
            start = request.seq.length
            sequences.append(
                SequenceLayout(
                    start, self.cache.slots(request.seq, start + n), torch.arange(start, start + n)
                )
            )
            ids += request.tokens[start : start + n]
        last_rows = torch.tensor([n for _, n in work]).cumsum(0) - 1
        logits = self._forward(BatchLayout(sequences), ids, last_rows)
        for (request, n), row in zip(work, logits, strict=True):
            request.seq.length += n
            self.cache.cache_prefix(request.seq, request.tokens)
            if request.behind == 0:
                request.logprobs = row[: self.vocab_size].float().log_softmax(-1).cpu()

    def _fits(self, positions: int) -> bool:
        return positions <= self.model.config.max_position_embeddings

    def _grow(self, items: list[tuple[SearchTree, _Request]], cost: dict[int, float]) -> None:
        """Levels 2..num_steps (`grow_levels`): one forward per level over every growing tree's
        frontier, each node a one-token sequence (`_node_layout`); each request takes its share."""
        scratch: dict[int, dict[int, int]] = {id(t): {} for t, _ in items}  # node -> scratch position
        # Each request's flat slots, its cache and the scratch `_search` reserved: read once a step.
        slots = {id(t): self.cache.slots(r.seq, len(r.seq.blocks) * self.cache.page_size) for t, r in items}

        def expand(level: list[tuple[int, list[int]]]) -> tuple[list[list[int]], list[list[float]]]:
            sequences, ids = [], []
            for i, nodes in level:
                tree, request = items[i]
                cost[id(request)] += self.level_cost / len(level)
                for node in nodes:
                    layout = self._node_layout(
                        tree, request.seq.length, node, scratch[id(tree)], slots[id(tree)]
                    )
                    sequences.append(layout)
                    ids.append(tree.tokens[node])
            logits = self._forward(BatchLayout(sequences), ids, torch.arange(len(ids)))
            k = max(items[i][0].budget.topk for i, _ in level)
            return ranked_children(logits[:, : self.vocab_size], k)

        grow_levels([t for t, _ in items], self.level_cost, expand)

    @staticmethod
    def _node_layout(
        tree: SearchTree, length: int, node: int, scratch: dict[int, int], slots: torch.Tensor
    ) -> SequenceLayout:
        """A frontier node as a one-token sequence: it attends to the request's cache (`length`
        positions) and to its ancestors, which earlier levels wrote to scratch positions past the
        cache; its own K/V goes to the next free scratch position. `slots`: the request's flat slot
        of each position."""
        path = []
        a = tree.parents[node]
        while a > 0:
            path.append(scratch[a])
            a = tree.parents[a]
        scratch[node] = length + len(scratch)
        kv_slots = torch.cat([slots[:length], slots[[*reversed(path), scratch[node]]]])
        position = torch.tensor([length - 1 + tree.depths[node]])
        return SequenceLayout(length + len(path), kv_slots, position)

    def _forward(self, layout: BatchLayout, ids: list[int], logits_rows: torch.Tensor) -> torch.Tensor:
        device = self.model.device
        plan = self.backend.plan(layout, device)
        out = self.model.forward(
            torch.tensor(ids, dtype=torch.long, device=device),
            layout.positions().to(device),
            self.backend,
            plan,
            self.cache.kv,
            logits_rows.to(device),
        )
        return out.logits

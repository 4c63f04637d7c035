"""The EAGLE-2 / EAGLE-3 drafter: a one-layer head over the target's features, drafting dynamic trees.

Per engine step, for the whole batch: (1) catch up: run the head over the pairs (feature of position
i, token i + 1) the verifier committed since last time, appending to each request's draft KV cache;
the last one gives the root's children. (2) Grow each tree for `num_steps` levels
(shared/drafting/tree_search.py), one batched head run per level over every request's expanded nodes.
Features reach the drafter as slots of the verifier's ring (in process, or shared memory when
co-located), copied at commit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch

from treespec.drafter.eagle.checkpoint import TargetShape, feature_spec, load_head
from treespec.drafter.eagle.config import EagleConfig
from treespec.drafter.eagle.draft_state import DraftKV, DraftState
from treespec.drafter.eagle.head import EagleHead, HeadOutput, attend, attend_rows
from treespec.drafter.eagle.head_config import EagleFormat
from treespec.drafter.eagle.native_pass import NativePass, PassRows
from treespec.drafter.eagle.token_map import load_token_map, restricted_lm_head
from treespec.drafter.merged.drafter import MergedDrafter
from treespec.drafter.ngram.drafter import NgramDrafter
from treespec.shared.drafting.drafter import Drafter, DrafterContext, DraftQuery
from treespec.shared.drafting.features import FeatureRing, FeatureSlots
from treespec.shared.drafting.target_access import TargetTensors
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.drafting.tree_search import SearchTree, grow_levels, proposal, ranked_children
from treespec.shared.model.dual_layout import HeadWeight

log = logging.getLogger(__name__)

FEW_ROWS = 32  # a request's rows in a head pass up to which attention takes attend_rows (head.py)


@dataclass(frozen=True)
class _Rows:
    """One request's rows in a batched head run, and the keys they attend to besides the cache."""

    state: DraftState
    count: int
    offset: int  # scratch rows before these in the draft cache: the tree nodes expanded earlier
    mask: torch.Tensor  # [count, offset + count] bool: which scratch rows each row sees (the cache: all)


class EagleDrafter(Drafter):
    expected_format: EagleFormat | None = None  # set by the registry names "eagle" / "eagle3"

    def __init__(
        self, head: EagleHead, target: TargetTensors, ring: FeatureRing, config: EagleConfig
    ) -> None:
        self.head = head
        self.target = target
        self.ring = ring
        self.config = config
        self._requests: dict[str, DraftState] = {}
        self._generator = torch.Generator().manual_seed(config.seed) if config.draft_probs else None
        self._native = NativePass.of(head)  # the head's pass in one native call, where it runs
        self._vocab_ids = head.draft_to_target() if head.config.is_eagle3 else None
        self._lm_head: HeadWeight | None = None if head.config.is_eagle3 else target.lm_head
        if config.token_map and not head.config.is_eagle3:
            # On the target's device: it maps the head's top-k indices, which live there, to target ids.
            hot = load_token_map(config.token_map, target.vocab_size).to(target.embed.device)
            self._vocab_ids, self._lm_head = hot, restricted_lm_head(target.embed, hot)
        self.level_cost = self._level_cost()

    def _level_cost(self) -> float:
        """config.level_cost, or a head step's weights (with the rows of the target's lm_head an EAGLE-2
        head reads) over a target step's. Counted in weights, not bytes: with its products in bfloat16
        a head step reads half the bytes but keeps its fixed costs (attention, norms, the tree), and
        half the price grew more levels with no more accepted tokens (docs/eagle.md)."""
        if self.config.level_cost is not None:
            return self.config.level_cost
        weights = self.head.step_weights()
        if not self.head.config.is_eagle3:
            rows = self.target.vocab_size if self._vocab_ids is None else int(self._vocab_ids.shape[0])
            weights += rows * self.target.hidden_size
        return weights / self.target.step_weights

    @classmethod
    def create(cls, context: DrafterContext) -> Drafter:
        """The head's drafter; with the `ngram` option, merged with an n-gram drafter."""
        config = EagleConfig.from_options(context.options)
        drafter = cls._create(context, config)
        if config.ngram is None:
            return drafter
        ngram = NgramDrafter.create(replace(context, options=dict(config.ngram), target=None))
        return MergedDrafter([drafter, ngram])

    @classmethod
    def _create(cls, context: DrafterContext, config: EagleConfig) -> EagleDrafter:
        if context.target is None:
            raise ValueError(
                "the EAGLE drafter reads the target: run it in process or co-located (--colocate)"
            )
        tensors = context.target.tensors()
        shape = TargetShape(tensors.hidden_size, tensors.vocab_size, tensors.num_layers)
        fmt = cls.expected_format or EagleFormat.EAGLE3
        head = load_head(config.head_path(fmt), shape)
        if cls.expected_format is not None and head.config.format is not cls.expected_format:
            raise ValueError(
                f"{config.head_path(fmt)} is an {head.config.format.value} head; "
                f"--speculative-algorithm {cls.expected_format.value.upper()} needs an "
                f"{cls.expected_format.value} head"
            )
        if config.token_map and head.config.is_eagle3:
            raise ValueError("--speculative-token-map applies to EAGLE-2 heads; EAGLE-3 heads have their own")
        head.to_device(tensors.embed.device, tensors.embed.dtype, config.matmul_dtype).eval()
        ring = context.target.feature_ring(feature_spec(head.config, shape), config.ring_capacity)
        return cls(head, tensors, ring, config)

    @property
    def feature_ring(self) -> FeatureRing | None:
        return self.ring

    # ---- lifecycle --------------------------------------------------------------------------------

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        c = self.head.config
        kv = DraftKV.empty(c.num_kv_heads, c.head_dim, self.target.embed.dtype, self.target.embed.device)
        self._requests[request_id] = DraftState(list(prompt), kv)

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        state = self._requests.get(request_id)
        if state is None:
            return
        state.pacing.committed(tokens)
        state.tokens.extend(tokens)
        if features is not None and len(features):
            state.add_features(features.start, self.ring.read(features.slots))

    def close(self, request_id: str) -> None:
        self._requests.pop(request_id, None)

    # ---- drafting ---------------------------------------------------------------------------------

    @torch.inference_mode()
    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        """Trees for the requests whose drafts pay (shared/drafting/draft_pacing.py); the others wait,
        features and all."""
        found = [self._requests.get(q.request_id) for q in queries]
        states = [s if s is not None and s.pacing.drafts_now() else None for s in found]
        head_cost: dict[int, float] = {id(s): 0.0 for s in states if s is not None}
        self._catch_up([s for s in states if s is not None], head_cost)
        searches: list[SearchTree | None] = []
        for query, state in zip(queries, states, strict=True):
            if (
                state is None
                or not state.ready
                or query.budget.num_draft_tokens < 2
                or query.budget.num_steps < 1
            ):
                searches.append(None)
                continue
            search = SearchTree(state.tokens[-1], query.budget, self.config.min_path_prob, state.child_odds)
            assert state.last_logprobs is not None
            search.add_children(0, state.last_logprobs, self._vocab_ids)
            searches.append(search)
        self._grow(
            [(s, st) for s, st in zip(searches, states, strict=True) if s is not None and st is not None],
            head_cost,
        )
        trees = [proposal(s, self._generator) for s in searches]
        for query, state, tree in zip(queries, states, trees, strict=True):
            if state is not None:
                budget = query.budget
                state.pacing.drafted(tree, head_cost[id(state)], budget.tree_cost, budget.node_cost)
        return trees

    def _catch_up(self, states: list[DraftState], head_cost: dict[int, float]) -> None:
        """Run the head over every pending (feature, next token) pair of these requests, batched; each
        takes its share of the pass in `head_cost`."""
        work = [(s, p) for s in states if (p := s.take_pending()) is not None]
        if not work:
            return
        for state, _ in work:
            head_cost[id(state)] += self.level_cost / len(work)
        ids, hidden, positions, groups = [], [], [], []
        for state, (start, rows) in work:
            n = rows.shape[0]
            ids.append(torch.tensor(state.tokens[start + 1 : start + 1 + n], dtype=torch.long))
            hidden.append(rows)
            positions.append(torch.arange(start, start + n))
            groups.append(_Rows(state, n, 0, torch.ones(n, n, dtype=torch.bool).tril()))
        out = self._run(torch.cat(ids), torch.cat(hidden), torch.cat(positions), groups)
        last_rows, at = [], 0
        for (state, (start, _rows)), group in zip(work, groups, strict=True):
            n = group.count
            state.kv.keep(n)
            state.next_position = start + n
            state.last_hidden = out.hidden[at + n - 1]
            last_rows.append(at + n - 1)
            at += n
        logprobs = self._logprobs(out.for_logits[torch.tensor(last_rows)])
        for (state, _), lp in zip(work, logprobs, strict=True):
            state.last_logprobs = lp

    def _grow(self, items: list[tuple[SearchTree, DraftState]], head_cost: dict[int, float]) -> None:
        """Levels 2..num_steps (`grow_levels`): one batched head pass per level over every growing
        tree's frontier; each request takes its share of each pass."""
        expanded_nodes: dict[int, list[int]] = {id(t): [] for t, _ in items}
        node_hidden: dict[tuple[int, int], torch.Tensor] = {}

        def expand(level: list[tuple[int, list[int]]]) -> tuple[list[list[int]], list[list[float]]]:
            ids, hidden, positions, groups, owners = [], [], [], [], []
            for i, nodes in level:
                tree, state = items[i]
                head_cost[id(state)] += self.level_cost / len(level)
                for node in nodes:
                    parent = tree.parents[node]
                    assert state.last_hidden is not None
                    hidden.append(state.last_hidden if parent == 0 else node_hidden[(id(tree), parent)])
                    ids.append(tree.tokens[node])
                    positions.append(state.next_position - 1 + tree.depths[node])
                    owners.append((tree, node))
                groups.append(self._tree_rows(tree, state, nodes, expanded_nodes[id(tree)]))
            out = self._run(
                torch.tensor(ids, dtype=torch.long), torch.stack(hidden), torch.tensor(positions), groups
            )
            for row, (tree, node) in enumerate(owners):
                node_hidden[(id(tree), node)] = out.hidden[row]
                expanded_nodes[id(tree)].append(node)
            return self._top_children(out.for_logits, max(items[i][0].budget.topk for i, _ in level))

        grow_levels([t for t, _ in items], self.level_cost, expand)

    @staticmethod
    def _tree_rows(
        tree: SearchTree,
        state: DraftState,
        nodes: list[int],
        expanded: list[int],
    ) -> _Rows:
        """Each node attends to the cache, its expanded ancestors (the scratch rows before it, in the
        order expanded), and itself. The mask (of the scratch rows) is made from Python lists at once:
        a tensor written entry by entry cost about 0.1 ms a level."""
        n = len(nodes)
        rows = []
        for r, node in enumerate(nodes):
            ancestors = set()
            a = tree.parents[node]
            while a > 0:
                ancestors.add(a)
                a = tree.parents[a]
            rows.append([e in ancestors for e in expanded] + [j == r for j in range(n)])
        return _Rows(state, n, len(expanded), torch.tensor(rows, dtype=torch.bool))

    def _run(
        self, ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, groups: list[_Rows]
    ) -> HeadOutput:
        """One batched head pass; each request's rows are written into its draft cache's scratch rows
        and attend to the cache and the scratch rows before them: in one native call where it serves
        (native_pass.py), else through the head's torch modules."""
        device = self.target.embed.device
        embeds = self.target.embed[ids.to(device)]
        hidden = hidden.to(device, embeds.dtype)
        native = self._native
        if native is not None and native.serves([g.count for g in groups]):
            return native.run(
                embeds, hidden, *self._rope_rows(positions, embeds.dtype), self._pass_rows(groups)
            )
        li = self.head.layer_input(embeds, hidden)
        qkv = self.head.qkv(li.attn_in, positions.to(device))
        outs, at = [], 0
        for g in groups:
            rows = slice(at, at + g.count)
            keys, values = g.state.kv.write(g.offset, qkv.k[rows], qkv.v[rows])
            cache = torch.ones(g.count, g.state.kv.length, dtype=torch.bool)
            mask = torch.cat([cache, g.mask], dim=1).to(device)
            rows_attend = attend_rows if g.count <= FEW_ROWS else attend
            outs.append(rows_attend(qkv.q[rows], keys, values, mask))
            at += g.count
        return self.head.finish(li.residual, torch.cat(outs))

    def _rope_rows(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [T, head_dim] of the rows' positions."""
        rope = self.head.rope
        return rope.cos[positions].to(dtype), rope.sin[positions].to(dtype)

    @staticmethod
    def _pass_rows(groups: list[_Rows]) -> list[PassRows]:
        """The native pass's view of the groups, each draft cache grown to hold its rows first."""
        rows = []
        for g in groups:
            kv = g.state.kv
            kv.reserve(kv.length + g.offset + g.count)
            rows.append(PassRows(kv.k, kv.v, g.count, kv.length, g.offset, g.mask))
        return rows

    def _logprobs(self, for_logits: torch.Tensor) -> torch.Tensor:
        return self.head.logits(for_logits, self._lm_head).float().log_softmax(dim=-1).cpu()

    def _top_children(self, for_logits: torch.Tensor, k: int) -> tuple[list[list[int]], list[list[float]]]:
        return ranked_children(self.head.logits(for_logits, self._lm_head), k, self._vocab_ids)


class Eagle2Drafter(EagleDrafter):
    """`--speculative-algorithm EAGLE`: an EAGLE-1/2 head."""

    expected_format = EagleFormat.EAGLE


class Eagle3Drafter(EagleDrafter):
    """`--speculative-algorithm EAGLE3`: an EAGLE-3 head (the shipped one by default)."""

    expected_format = EagleFormat.EAGLE3

"""Token trees from candidate continuations: merge them into a trie, then pick nodes.

BFS (SGLang's default) walks level by level, letting each node keep fewer children as depth grows
(from max to min BFS breadth). PROB keeps the nodes with the highest estimated path probability.
Both stop at the node budget, the depth limit and at nodes whose estimated path probability falls
below `min_path_prob`. Then, weighing each node's estimated path probability against what its verify
row costs (the budget's node cost), only the nodes that pay for themselves stay
(shared/drafting/tree_value.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch

from treespec.drafter.ngram.calibration import NodeKind, node_kind
from treespec.drafter.ngram.candidates import MEMORY_BUCKET_BASE, Candidate
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.drafting.tree_value import nodes_worth_verifying

Estimator = Callable[[NodeKind], float]


@dataclass(frozen=True)
class TreeShape:
    match_type: str  # "BFS" or "PROB"
    min_bfs_breadth: int
    max_bfs_breadth: int
    min_path_prob: float


@dataclass(slots=True)
class _TrieNode:
    """A node of the candidates' trie: the candidates through it, their total weight, the strongest
    kind of match among them. Its children are grouped on first use: a selection expands only the few
    nodes it picks, where merging every token of every candidate (up to 16 local matches and a dozen
    memory windows, each up to the depth) cost most of a drafting step."""

    token: int
    depth: int  # of this node below the root: its children take the candidates' token at this offset
    max_depth: int
    members: list[tuple[Candidate, tuple[int, int]]]  # (candidate, its strength), in candidate order
    weight: float = 0.0
    bucket: int = 0  # the strongest kind of match through this node
    strength: tuple[int, int] = (0, 0)  # its rank (_bucket_strength)
    _children: dict[int, _TrieNode] | None = None

    @property
    def children(self) -> dict[int, _TrieNode]:
        """Token -> child, in the order of the first candidate through each; weights summed and the
        strongest bucket kept in candidate order (a later candidate replaces it only if stronger)."""
        if self._children is None:
            self._children = {}
            if self.depth < self.max_depth:
                for candidate, strength in self.members:
                    if len(candidate.tokens) > self.depth:
                        self._add(self._children, candidate, strength)
        return self._children

    def _add(self, children: dict[int, _TrieNode], candidate: Candidate, strength: tuple[int, int]) -> None:
        token = candidate.tokens[self.depth]
        child = children.get(token)
        if child is None:
            child = _TrieNode(token, self.depth + 1, self.max_depth, [], 0.0, candidate.bucket, strength)
            children[token] = child
        elif strength > child.strength:
            child.bucket, child.strength = candidate.bucket, strength
        child.weight += candidate.weight
        child.members.append((candidate, strength))

    def ranked_children(self) -> list[tuple[_TrieNode, float]]:
        """The children, heaviest first, each with its share of the candidate weight through them."""
        children = self.children.values()
        total = sum(c.weight for c in children)
        ranked = sorted(children, key=lambda c: -c.weight)
        return [(c, c.weight / total if total > 0 else 1.0) for c in ranked]


@dataclass
class DraftedTree:
    """The chosen tree and, per node, its kind (so that outcomes can be learned from)."""

    tree: TokenTree
    kinds: list[NodeKind | None]  # None for the root


def build_tree(
    root_token: int,
    candidates: Sequence[Candidate],
    budget: TreeBudget,
    shape: TreeShape,
    estimate: Estimator,
) -> DraftedTree | None:
    max_depth = budget.num_steps
    if budget.num_draft_tokens < 2 or max_depth < 1 or not candidates:
        return None
    trie = _trie(root_token, candidates, max_depth)
    select = _select_bfs if shape.match_type.upper() == "BFS" else _select_prob
    picked = _worth_verifying(select(trie, budget, _paying(shape, budget), estimate), budget)
    if len(picked.tokens) < 2:
        return None
    tree = TokenTree(
        torch.tensor(picked.tokens, dtype=torch.long),
        torch.tensor(picked.parents, dtype=torch.long),
        path_probs=torch.tensor(picked.probs, dtype=torch.float32),
    )
    return DraftedTree(tree, picked.kinds)


def _paying(shape: TreeShape, budget: TreeBudget) -> TreeShape:
    """The shape that also stops at nodes less likely than the node cost: no such node is worth its
    verify row (tree_value.py: the last node kept has a path probability of at least the node cost,
    since the rate it ends at, at least 1, lies between the rate before it and its probability over
    the node cost), so picking one, and walking its children, would only take a place in the budget
    that a node worth verifying could have."""
    if budget.node_cost <= shape.min_path_prob:
        return shape
    return replace(shape, min_path_prob=budget.node_cost)


def _trie(root_token: int, candidates: Sequence[Candidate], max_depth: int) -> _TrieNode:
    """The candidates' trie, its levels merged as they are walked (_TrieNode.children); a candidate's
    strength is ranked once."""
    members = [(c, _bucket_strength(c.bucket)) for c in candidates]
    return _TrieNode(root_token, 0, max_depth, members)


def _bucket_strength(bucket: int) -> tuple[int, int]:
    """Local matches first, then longer windows (see candidates.py for the numbering)."""
    return (int(bucket < MEMORY_BUCKET_BASE), bucket % MEMORY_BUCKET_BASE)


def _breadth(depth: int, max_depth: int, shape: TreeShape) -> int:
    if max_depth <= 1:
        return shape.max_bfs_breadth
    span = shape.max_bfs_breadth - shape.min_bfs_breadth
    return round(shape.max_bfs_breadth - span * (depth - 1) / (max_depth - 1))


class _Picked(NamedTuple):
    tokens: list[int]
    parents: list[int]
    kinds: list[NodeKind | None]  # None for the root
    probs: list[float]  # estimated path probabilities (the root's: 1)


def _worth_verifying(picked: _Picked, budget: TreeBudget) -> _Picked:
    """The picked nodes that pay for their verify rows: the best by path probability (a child's never
    exceeds its parent's, and ties go to the earlier node, so they form a tree), in the picked order."""
    tokens, parents, kinds, probs = picked
    ranked = sorted(range(1, len(tokens)), key=lambda i: (-probs[i], i))
    worth = nodes_worth_verifying([probs[i] for i in ranked], budget.node_cost, budget.tree_cost)
    keep = sorted(ranked[:worth])
    if len(keep) == len(tokens) - 1:
        return picked
    new_index = {0: 0} | {old: new for new, old in enumerate(keep, start=1)}
    order = [0, *keep]
    return _Picked(
        [tokens[i] for i in order],
        [-1] + [new_index[parents[i]] for i in keep],
        [kinds[i] for i in order],
        [probs[i] for i in order],
    )


def _select_bfs(trie: _TrieNode, budget: TreeBudget, shape: TreeShape, estimate: Estimator) -> _Picked:
    tokens, parents, probs = [trie.token], [-1], [1.0]
    kinds: list[NodeKind | None] = [None]
    level: list[tuple[_TrieNode, int, float]] = [(trie, 0, 1.0)]  # (trie node, tree index, path prob)
    for depth in range(1, budget.num_steps + 1):
        breadth = min(_breadth(depth, budget.num_steps, shape), budget.topk)
        next_level: list[tuple[_TrieNode, int, float]] = []
        for node, index, path_prob in level:
            for rank, (child, share) in enumerate(node.ranked_children()[:breadth]):
                kind = node_kind(child.bucket, depth, rank, share)
                prob = path_prob * estimate(kind)
                if prob < shape.min_path_prob or len(tokens) >= budget.num_draft_tokens:
                    break
                tokens.append(child.token)
                parents.append(index)
                kinds.append(kind)
                probs.append(prob)
                next_level.append((child, len(tokens) - 1, prob))
        level = sorted(next_level, key=lambda item: -item[2])
        if not level:
            break
    return _Picked(tokens, parents, kinds, probs)


def _select_prob(trie: _TrieNode, budget: TreeBudget, shape: TreeShape, estimate: Estimator) -> _Picked:
    """Best-first by path probability; a child's never exceeds its parent's, so parents come first."""
    tokens, parents, probs = [trie.token], [-1], [1.0]
    kinds: list[NodeKind | None] = [None]
    # (-path prob, tiebreak, parent index, depth, kind, trie node)
    heap: list[tuple[float, int, int, int, NodeKind, _TrieNode]] = []
    counter = 0

    def push_children(node: _TrieNode, index: int, depth: int, path_prob: float) -> None:
        nonlocal counter
        if depth > budget.num_steps:
            return
        for rank, (child, share) in enumerate(node.ranked_children()[: budget.topk]):
            kind = node_kind(child.bucket, depth, rank, share)
            heapq.heappush(heap, (-path_prob * estimate(kind), counter, index, depth, kind, child))
            counter += 1

    push_children(trie, 0, 1, 1.0)
    while heap and len(tokens) < budget.num_draft_tokens:
        neg_prob, _, parent, depth, kind, node = heapq.heappop(heap)
        if -neg_prob < shape.min_path_prob:
            break
        tokens.append(node.token)
        parents.append(parent)
        kinds.append(kind)
        probs.append(-neg_prob)
        push_children(node, len(tokens) - 1, depth + 1, -neg_prob)
    return _Picked(tokens, parents, kinds, probs)

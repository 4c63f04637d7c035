"""One tree from several drafters' trees for the same request: their union, cut back to the budget.

Each tree must carry `path_probs` (its drafter's estimate that a node's whole path is accepted). The
union merges equal token paths; a node's value is the best estimate any tree gives it. Nodes are then
taken best first (a child's value never exceeds its parent's, ties go to the earlier tree), within the
budget's node count, depth and children per node, and finally as many as pay for their verify rows
(tree_value.py).

Draft probabilities: when every node taken comes from the first tree, the result is that tree cut
down, in its order, with each parent's sibling probabilities renormalised over the children kept (the
relative order of a subset of a draw without replacement is a draw without replacement from the
renormalised subset, so the lossless sampling rule still holds). A tree that mixes drafters' nodes
carries no draft probabilities: its children are point masses, which is lossless for any fixed choice.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.drafting.tree_value import nodes_worth_verifying


@dataclass
class _Node:
    token: int
    parent: int
    depth: int
    value: float
    sources: dict[int, int] = field(default_factory=dict)  # tree index -> node index in that tree
    children: dict[int, int] = field(default_factory=dict)  # token -> union index


def merge_trees(trees: Sequence[TokenTree], budget: TreeBudget) -> TokenTree | None:
    """The merged tree, or None when no node is worth drafting. All trees share the root token."""
    if not trees:
        return None
    if len({int(t.tokens[0]) for t in trees}) != 1:
        raise ValueError("trees to merge must share their root token")
    union = _union(trees)
    taken = _take(union, budget)
    if not taken:
        return None
    if all(0 in union[i].sources for i in taken):
        return _cut_first(trees[0], sorted(union[i].sources[0] for i in taken))
    return _mixed(union, taken)


def _union(trees: Sequence[TokenTree]) -> list[_Node]:
    union = [_Node(int(trees[0].tokens[0]), -1, 0, 1.0, {t: 0 for t in range(len(trees))})]
    for t, tree in enumerate(trees):
        if tree.path_probs is None:
            raise ValueError("trees to merge need path_probs")
        at = {0: 0}  # node of this tree -> union node
        for i, (token, parent, value) in enumerate(
            zip(tree.tokens.tolist(), tree.parents.tolist(), tree.path_probs.tolist(), strict=True)
        ):
            if i == 0:
                continue
            up = at[parent]
            found = union[up].children.get(token)
            if found is None:
                found = union[up].children[token] = len(union)
                union.append(_Node(token, up, union[up].depth + 1, value))
            node = union[found]
            node.value = max(node.value, value)
            node.sources[t] = i
            at[i] = found
    return union


def _take(union: list[_Node], budget: TreeBudget) -> list[int]:
    """Union nodes best first within the budget, then as many as pay for their rows (parents first)."""
    heap: list[tuple[float, int, int]] = []  # (-value, first tree holding it, union index)

    def offer(node: int) -> None:
        for c in union[node].children.values():
            if union[c].depth <= budget.num_steps:
                heapq.heappush(heap, (-union[c].value, min(union[c].sources), c))

    taken: list[int] = []
    kept_children = [0] * len(union)
    offer(0)
    while heap and len(taken) < budget.num_draft_tokens - 1:
        _, _, node = heapq.heappop(heap)
        parent = union[node].parent
        if kept_children[parent] >= budget.topk:
            continue
        kept_children[parent] += 1
        taken.append(node)
        offer(node)
    worth = nodes_worth_verifying([union[i].value for i in taken], budget.node_cost, budget.tree_cost)
    return taken[:worth]


def _cut_first(tree: TokenTree, keep: list[int]) -> TokenTree:
    """`tree` with only the root and `keep` (ascending, parents included), in its order."""
    order = [0, *keep]
    new_index = {old: new for new, old in enumerate(order)}
    parents = [-1] + [new_index[int(tree.parents[i])] for i in keep]
    probs = None
    if tree.probs is not None:
        kept = list(zip(tree.probs[order].tolist(), parents, strict=True))[1:]  # (q, parent) per node
        sums: dict[int, float] = {}
        for q, p in kept:
            sums[p] = sums.get(p, 0.0) + q
        renormalised = [q / sums[p] if sums[p] > 0 else 1.0 for q, p in kept]
        probs = torch.tensor([float(tree.probs[0]), *renormalised], dtype=tree.probs.dtype)
    path_probs = None if tree.path_probs is None else tree.path_probs[order].clone()
    return TokenTree(tree.tokens[order].clone(), torch.tensor(parents, dtype=torch.long), probs, path_probs)


def _mixed(union: list[_Node], taken: list[int]) -> TokenTree:
    """The taken nodes (parents before children, as taken), without draft probabilities."""
    order = [0, *taken]
    new_index = {old: new for new, old in enumerate(order)}
    return TokenTree(
        torch.tensor([union[i].token for i in order], dtype=torch.long),
        torch.tensor([-1] + [new_index[union[i].parent] for i in taken], dtype=torch.long),
        None,
        torch.tensor([union[i].value for i in order], dtype=torch.float32),
    )

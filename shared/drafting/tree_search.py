"""EAGLE-2's dynamic tree, for one request: which nodes to expand each step, which to keep at the end.

Level 1 is the root's `topk` most likely children. Each later step expands the `topk` best nodes of
the previous level (by cumulative draft log-probability) by their `topk` best children. At the end
the `num_draft_tokens - 1` best nodes overall are kept, or fewer when the budget's node cost says
the weakest of them do not pay for their verify rows (shared/drafting/tree_value.py): a child never
scores above its parent (and ties go to the earlier node), so the kept set is a tree, and a level
whose expanded nodes all rank below the kept places is not grown (`can_add_kept`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from treespec.kernels.row_ops import top_logprobs
from treespec.shared.drafting.child_odds import ChildOdds
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.drafting.tree_value import nodes_worth_verifying


@dataclass
class SearchTree:
    root_token: int
    budget: TreeBudget
    min_path_prob: float = 0.0  # nodes less likely than this (by draft probability) are not drafted
    odds: ChildOdds = field(default_factory=ChildOdds)  # the request's recent children (child_odds.py)
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)  # cumulative log q
    logq: list[float] = field(default_factory=list)  # log q(token | parent)
    depths: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._add(self.root_token, -1, 0.0, 0.0, 0)

    def _add(self, token: int, parent: int, score: float, logq: float, depth: int) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.scores.append(score)
        self.logq.append(logq)
        self.depths.append(depth)
        return len(self.tokens) - 1

    def add_children(self, parent: int, logprobs: torch.Tensor, token_ids: torch.Tensor | None) -> list[int]:
        """The parent's `topk` best children from its draft log-probabilities (over `token_ids`, or
        over target ids when None)."""
        k = min(self.budget.topk, int(logprobs.shape[0]))
        values, index = logprobs.topk(k)
        ids = index if token_ids is None else token_ids[index]
        return self.add_ranked(parent, ids.tolist(), values.tolist())

    def add_ranked(self, parent: int, tokens: list[int], logq: list[float]) -> list[int]:
        """The parent's children from candidates best first (target ids, draft log-probabilities):
        the first `topk` of them."""
        base, depth = self.scores[parent], self.depths[parent] + 1
        k = self.budget.topk
        return [self._add(t, parent, base + v, v, depth) for t, v in zip(tokens[:k], logq[:k], strict=True)]

    def best(self, nodes: list[int], n: int) -> list[int]:
        """The n best of `nodes` whose path probability reaches min_path_prob (a node below it costs a
        verify row and, expanded, a head row, for little chance of acceptance)."""
        floor = math.log(self.min_path_prob) if self.min_path_prob > 0 else -math.inf
        likely = [i for i in nodes if self.scores[i] >= floor]
        return sorted(likely, key=lambda i: (-self.scores[i], i))[:n]

    def level_gain(self, nodes: list[int]) -> float:
        """The tokens expanding `nodes` is expected to add, less their children's verify rows
        (child_odds.py)."""
        path_probs = [math.exp(self.scores[i]) for i in nodes]
        return self.odds.level_gain(path_probs, self.budget.topk, self.budget.node_cost)

    def can_add_kept(self, frontier: list[int]) -> bool:
        """Whether expanding `frontier` could change the kept nodes. Not when the best
        `num_draft_tokens - 1` places are full and no frontier node scores above the last of them: a
        child scores at most its parent and, created later, loses ties, and that last score only rises
        as the tree grows, so no child nor later descendant could take a place."""
        places = self.budget.num_draft_tokens - 1
        ranked = self.best(list(range(1, len(self.tokens))), places)
        if len(ranked) < places:
            return True
        last = self.scores[ranked[-1]]
        return any(self.scores[i] > last for i in frontier)

    def kept(self) -> list[int]:
        """The best `num_draft_tokens - 1` drafted nodes, as many of them as pay for their verify
        rows, in creation order (parents first)."""
        ranked = self.best(list(range(1, len(self.tokens))), self.budget.num_draft_tokens - 1)
        path_probs = [math.exp(self.scores[i]) for i in ranked]
        worth = nodes_worth_verifying(path_probs, self.budget.node_cost, self.budget.tree_cost)
        return sorted(ranked[:worth])

    def to_token_tree(self, generator: torch.Generator | None) -> TokenTree:
        """The kept nodes as a TokenTree. With a generator, each parent's children carry q renormalised
        over them and are ordered as a draw without replacement from it (Gumbel top-k), which is what
        the lossless sampling rule needs of draft probabilities; without one, no probabilities."""
        kept = set(self.kept())
        children: dict[int, list[int]] = {}
        for node in sorted(kept):
            children.setdefault(self.parents[node], []).append(node)
        order, probs, parents = [0], [1.0], [-1]
        new_index = {0: 0}
        queue = [0]
        while queue:
            node = queue.pop(0)
            kids = children.get(node, [])
            q = torch.tensor([self.logq[c] for c in kids], dtype=torch.float64).softmax(0) if kids else None
            if kids and generator is not None and q is not None:
                gumbel = -torch.empty(len(kids), dtype=torch.float64).exponential_(generator=generator).log()
                perm = (q.log() + gumbel).argsort(descending=True).tolist()
                kids, q = [kids[i] for i in perm], q[perm]
            for j, c in enumerate(kids):
                new_index[c] = len(order)
                order.append(c)
                parents.append(new_index[node])
                probs.append(float(q[j]) if q is not None else 1.0)
                queue.append(c)
        tokens = torch.tensor([self.tokens[i] for i in order], dtype=torch.long)
        tree_probs = torch.tensor(probs, dtype=torch.float32) if generator is not None else None
        path_probs = torch.tensor([math.exp(self.scores[i]) for i in order], dtype=torch.float32)
        return TokenTree(tokens, torch.tensor(parents, dtype=torch.long), tree_probs, path_probs)


def ranked_children(
    logits: torch.Tensor, k: int, token_ids: torch.Tensor | None = None
) -> tuple[list[list[int]], list[list[float]]]:
    """Each row's k most likely next tokens (through `token_ids` where the drafter's vocabulary is a
    subset of the target's) and their draft log-probabilities, best first: one top-k and one
    log-sum-exp over the rows (one kernel call on a CPU), read out as lists at once
    (`SearchTree.add_ranked`'s input)."""
    logq, index = top_logprobs(logits.float(), min(k, logits.shape[-1]))
    ids = index if token_ids is None else token_ids[index]
    return ids.cpu().tolist(), logq.cpu().tolist()


# One level's pass of a drafter: given the active trees (their indices) and the frontier nodes of each,
# in order, each node's ranked children (`ranked_children`), in the same order.
LevelPass = Callable[[list[tuple[int, list[int]]]], tuple[list[list[int]], list[list[float]]]]


def grow_levels(trees: Sequence[SearchTree], level_cost: float, expand: LevelPass) -> None:
    """Levels 2..num_steps of every tree at once: each level, `expand` runs the drafter once over the
    best `topk` nodes of the last level of every tree still growing, which is one whose frontier's
    children are expected to be worth a draft pass (`level_cost`, in target steps; each tree's
    `odds` learn from its first level and from every expansion) and could still be kept
    (`SearchTree.can_add_kept`)."""
    for t in trees:
        t.odds.observe(t.logq[1:])  # the root's children: the first level, best first
    frontier = [t.best(list(range(1, len(t.tokens))), t.budget.topk) for t in trees]
    level = 1
    while True:
        active = [
            (i, frontier[i])
            for i, t in enumerate(trees)
            if level < t.budget.num_steps
            and frontier[i]
            and t.level_gain(frontier[i]) >= level_cost
            and t.can_add_kept(frontier[i])
        ]
        if not active:
            return
        tokens, logq = expand(active)
        row = 0
        for i, nodes in active:
            tree, new_level = trees[i], []
            for node in nodes:
                children = tree.add_ranked(node, tokens[row], logq[row])
                tree.odds.observe([tree.logq[c] for c in children])
                new_level += children
                row += 1
            frontier[i] = tree.best(new_level, tree.budget.topk)
        level += 1


def proposal(search: SearchTree | None, generator: torch.Generator | None) -> TokenTree | None:
    """The search's kept nodes as the tree to verify; None for no search or a bare root (plain
    decoding)."""
    tree = None if search is None else search.to_token_tree(generator)
    return None if tree is None or tree.num_nodes == 1 else tree

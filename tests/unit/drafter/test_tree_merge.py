"""Merging drafters' trees: exact trees for crafted inputs, every budget respected, parents before
children, draft probabilities kept only where the lossless rule allows."""

from __future__ import annotations

import random

import pytest
import torch

from treespec.kernels.tree_mask import tree_depths, validate_tree
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.drafting.tree_merge import merge_trees


def tree(
    tokens: list[int], parents: list[int], path_probs: list[float], probs: list[float] | None = None
) -> TokenTree:
    return TokenTree(
        torch.tensor(tokens),
        torch.tensor(parents),
        None if probs is None else torch.tensor(probs),
        torch.tensor(path_probs),
    )


def paths(t: TokenTree) -> dict[tuple[int, ...], float]:
    """Each node's token path below the root -> its path probability."""
    tokens, parents = t.tokens.tolist(), t.parents.tolist()
    assert t.path_probs is not None
    out: dict[tuple[int, ...], float] = {}
    for i in range(1, len(tokens)):
        path, at = [], i
        while at > 0:
            path.append(tokens[at])
            at = parents[at]
        out[tuple(reversed(path))] = round(float(t.path_probs[i]), 4)
    return out


# A head's tree: root 9 -> 1 (.6) -> 2 (.3); root -> 3 (.2); with sibling probabilities.
HEAD = tree([9, 1, 3, 2], [-1, 0, 0, 1], [1.0, 0.6, 0.2, 0.3], probs=[1.0, 0.75, 0.25, 1.0])
# An n-gram chain: root 9 -> 1 (.5) -> 4 (.45) -> 5 (.4).
CHAIN = tree([9, 1, 4, 5], [-1, 0, 1, 2], [1.0, 0.5, 0.45, 0.4])


def test_the_union_takes_the_best_nodes_of_both() -> None:
    merged = merge_trees([HEAD, CHAIN], TreeBudget(num_draft_tokens=5, num_steps=5, topk=4))
    assert merged is not None
    # 1 is in both (the better estimate stays); then 4, 5 (the chain), 2 (the head); 3 (.2) left out.
    assert paths(merged) == {(1,): 0.6, (1, 4): 0.45, (1, 4, 5): 0.4, (1, 2): 0.3}
    assert merged.probs is None  # nodes of two drafters: point masses
    problem = validate_tree(
        merged.tokens, merged.parents, None, vocab_size=16, max_nodes=5, max_depth=5, max_children=4
    )
    assert problem is None, problem


def test_a_merge_of_the_first_trees_nodes_keeps_its_order_and_renormalised_probabilities() -> None:
    weak = tree([9, 3, 7], [-1, 0, 1], [1.0, 0.1, 0.05])  # adds 3 -> 7 (.05): too weak to be taken
    merged = merge_trees([HEAD, weak], TreeBudget(num_draft_tokens=4, num_steps=5, topk=4))
    assert merged is not None
    assert merged.tokens.tolist() == HEAD.tokens.tolist() and merged.parents.tolist() == HEAD.parents.tolist()
    assert merged.probs is not None and HEAD.probs is not None
    assert merged.probs.tolist() == pytest.approx(HEAD.probs.tolist())
    # Cut to two nodes: 1 and 2 stay; 1 is now its parent's only child (probability 1).
    cut = merge_trees([HEAD, weak], TreeBudget(num_draft_tokens=3, num_steps=5, topk=4))
    assert cut is not None and cut.tokens.tolist() == [9, 1, 2] and cut.parents.tolist() == [-1, 0, 1]
    assert cut.probs is not None and cut.probs.tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_depth_and_children_per_node_are_respected() -> None:
    wide = tree([9, 1, 5, 6, 7], [-1, 0, 0, 0, 0], [1.0, 0.9, 0.8, 0.7, 0.65])
    merged = merge_trees([HEAD, CHAIN, wide], TreeBudget(num_draft_tokens=8, num_steps=2, topk=3))
    assert merged is not None
    assert paths(merged) == {(1,): 0.9, (5,): 0.8, (6,): 0.7, (1, 4): 0.45, (1, 2): 0.3}


def test_nodes_must_pay_for_their_verify_rows() -> None:
    free = merge_trees([HEAD, CHAIN], TreeBudget(8, 5, 4))
    costly = merge_trees([HEAD, CHAIN], TreeBudget(8, 5, 4, node_cost=0.3))
    assert free is not None and costly is not None
    assert free.num_nodes == 6 and set(paths(costly)) == {(1,), (1, 4), (1, 4, 5)}
    assert merge_trees([HEAD, CHAIN], TreeBudget(8, 5, 4, node_cost=0.7)) is None


def test_random_trees_merge_within_every_budget() -> None:
    rng = random.Random(5)
    for _ in range(300):
        trees = [_random_tree(rng) for _ in range(rng.randint(1, 3))]
        budget = TreeBudget(rng.randint(2, 12), rng.randint(1, 5), rng.randint(1, 4))
        merged = merge_trees(trees, budget)
        if merged is None:
            continue
        problem = validate_tree(
            merged.tokens,
            merged.parents,
            merged.probs,
            vocab_size=8,
            max_nodes=budget.num_draft_tokens,
            max_depth=budget.num_steps,
            max_children=budget.topk,
        )
        assert problem is None, problem
        assert merged.path_probs is not None
        parents = merged.parents.tolist()
        assert all(merged.path_probs[i] <= merged.path_probs[parents[i]] for i in range(1, len(parents)))
        union = {p: v for t in trees for p, v in paths(t).items()}
        assert set(paths(merged)) <= set(union)
        assert int(tree_depths(merged.parents).max()) <= budget.num_steps


def _random_tree(rng: random.Random) -> TokenTree:
    """Up to 10 nodes over tokens 0..7, distinct siblings, each child's value at most its parent's;
    sibling probabilities per parent summing to 1."""
    tokens, parents, values = [0], [-1], [1.0]
    for _ in range(rng.randint(1, 9)):
        parent = rng.randrange(len(tokens))
        taken = {tokens[i] for i in range(len(tokens)) if parents[i] == parent}
        free = [t for t in range(8) if t not in taken]
        if not free:
            continue
        tokens.append(rng.choice(free))
        parents.append(parent)
        values.append(values[parent] * rng.random())
    probs = [1.0] * len(tokens)
    for parent in set(parents[1:]):
        kids = [i for i in range(1, len(tokens)) if parents[i] == parent]
        for i in kids:
            probs[i] = 1.0 / len(kids)
    return tree(tokens, parents, values, probs)


def test_trees_of_different_roots_or_without_path_probabilities_are_refused() -> None:
    with pytest.raises(ValueError, match="root"):
        merge_trees([HEAD, tree([8, 1], [-1, 0], [1.0, 0.5])], TreeBudget())
    with pytest.raises(ValueError, match="path_probs"):
        merge_trees([HEAD, TokenTree.chain([9, 1])], TreeBudget())
    assert merge_trees([], TreeBudget()) is None

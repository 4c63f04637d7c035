import math

import pytest
import torch

from treespec.shared.drafting.child_odds import NEW_WEIGHT, ChildOdds
from treespec.shared.drafting.token_tree import TreeBudget
from treespec.shared.drafting.tree_search import SearchTree, grow_levels


def logs(*qs: float) -> list[float]:
    return [math.log(q) for q in qs]


def test_each_rank_averages_its_children_then_follows_the_newest() -> None:
    odds = ChildOdds()
    odds.observe(logs(0.6, 0.2))
    odds.observe(logs(0.4, 0.1, 0.05))
    assert odds.means == pytest.approx([0.5, 0.15, 0.05])  # plain averages while few are seen
    for _ in range(1000):
        odds.observe(logs(0.9, 0.05, 0.01))
    assert odds.means == pytest.approx([0.9, 0.05, 0.01], abs=1e-6)  # the old text is forgotten
    odds.observe(logs(0.1))
    assert odds.means[0] == pytest.approx(0.9 + NEW_WEIGHT * (0.1 - 0.9))


def test_a_level_gains_its_childrens_expected_path_probabilities_that_pay_for_their_rows() -> None:
    odds = ChildOdds()
    assert odds.level_gain([0.5, 0.25], 4, 0.1) == pytest.approx(0.75)  # nothing seen: the most it adds
    odds.observe(logs(0.6, 0.2, 0.1))
    # Children expected at 0.5 * (0.6, 0.2, 0.1) and 0.25 * (0.6, 0.2, 0.1), each less a row of 0.05:
    # 0.25 + 0.05 + 0 and 0.1 + 0 + 0.
    assert odds.level_gain([0.5, 0.25], 4, 0.05) == pytest.approx(0.25 + 0.05 + 0.1)
    assert odds.level_gain([0.5, 0.25], 1, 0.05) == pytest.approx(0.25 + 0.1)  # topk 1: the best child
    assert odds.level_gain([0.5, 0.25], 4, 0.0) == pytest.approx(0.75 * 0.9)  # free rows: every child
    assert odds.level_gain([0.5, 0.25], 4, 0.5) == 0.0  # no child could pay for its row


def _tree(budget: TreeBudget, odds: ChildOdds, *qs: float) -> SearchTree:
    tree = SearchTree(1, budget, odds=odds)
    tree.add_children(0, torch.tensor(qs).log(), None)
    return tree


def _passes(best: float) -> int:
    """The level passes a tree grows from root children of 0.5, 0.4 and 0.1 (their path probabilities),
    rows at 0.2 of a step, for a head whose best child's draft probability has been `best`."""
    budget = TreeBudget(num_draft_tokens=16, num_steps=4, topk=2, node_cost=0.2)
    odds = ChildOdds()
    for _ in range(100):  # what this head's earlier steps looked like
        odds.observe(logs(best, 0.01))
    tree = _tree(budget, odds, 0.5, 0.4, 0.1)
    passes = 0

    def expand(level: list[tuple[int, list[int]]]) -> tuple[list[list[int]], list[list[float]]]:
        nonlocal passes
        passes += 1
        rows = sum(len(nodes) for _, nodes in level)
        rest = (1 - best) / 2
        return [[10, 11, 12]] * rows, [logs(best, rest, rest)] * rows

    grow_levels([tree], 0.05, expand)
    return passes


def test_levels_grow_while_a_confident_head_is_expected_to_pay() -> None:
    """A head whose best child is likely grows every level; one whose children are unlikely stops after
    the root's children, though the nodes it would expand hold the same path probability."""
    assert _passes(0.9) == 3
    assert _passes(0.3) == 0

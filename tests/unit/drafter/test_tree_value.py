"""How many ranked draft nodes pay for their verify rows."""

from __future__ import annotations

import pytest

from treespec.shared.drafting.token_tree import TreeBudget
from treespec.shared.drafting.tree_value import nodes_worth_verifying
from treespec.shared.rpc.tree_codec import budget_from_proto, budget_to_proto


def test_free_rows_keep_every_node_even_hopeless_ones() -> None:
    assert nodes_worth_verifying([0.9, 0.5, 0.0, 0.0], 0.0) == 4
    assert nodes_worth_verifying([], 0.3) == 0


def test_the_best_prefix_by_tokens_per_unit_of_time() -> None:
    # rates: n=1 1.9/1.05=1.810, n=2 2.4/1.10=2.182, n=3 2.44/1.15=2.122, n=4 2.45/1.20=2.042
    assert nodes_worth_verifying([0.9, 0.5, 0.04, 0.01], 0.05) == 2
    # cheaper rows: n=2 2.4/1.04=2.308, n=3 2.44/1.06=2.302; cheaper still, the 0.04 node pays
    assert nodes_worth_verifying([0.9, 0.5, 0.04, 0.01], 0.02) == 2
    assert nodes_worth_verifying([0.9, 0.5, 0.04, 0.01], 0.01) == 3  # 2.44/1.03=2.369 > 2.45/1.04=2.356


def test_a_row_dearer_than_any_gain_keeps_nothing() -> None:
    assert nodes_worth_verifying([0.9, 0.8], 1.5) == 0


@pytest.mark.parametrize("cost", [-0.1, float("nan"), float("inf")])
def test_a_budget_refuses_a_bad_node_cost(cost: float) -> None:
    with pytest.raises(ValueError, match="node cost"):
        TreeBudget(8, 5, 4, node_cost=cost)


def test_the_node_cost_crosses_the_wire() -> None:
    budget = TreeBudget(12, 11, 10, node_cost=0.0625)
    assert budget_from_proto(budget_to_proto(budget)) == budget
    assert budget_from_proto(budget_to_proto(TreeBudget(8, 5, 4))).node_cost == 0.0

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


def test_a_tree_must_also_pay_its_fixed_cost() -> None:
    # rates with tree cost 0.2: n=1 1.15/1.25=0.92, n=2 1.25/1.3=0.96, n=3 1.3/1.35=0.963: below a plain step
    assert nodes_worth_verifying([0.15, 0.1, 0.05], 0.05, 0.2) == 0
    assert nodes_worth_verifying([0.15, 0.1, 0.05], 0.05) == 2  # 1.25/1.1=1.136 > 1.3/1.15=1.130
    # a likely tree pays it, and past the fixed cost its nodes are weighed as before
    assert nodes_worth_verifying([0.9, 0.5, 0.04, 0.01], 0.05, 0.2) == 2


@pytest.mark.parametrize("cost", [-0.1, float("nan"), float("inf")])
def test_a_budget_refuses_a_bad_tree_cost(cost: float) -> None:
    with pytest.raises(ValueError, match="tree cost"):
        TreeBudget(8, 5, 4, tree_cost=cost)


@pytest.mark.parametrize("cost", [-0.1, float("nan"), float("inf")])
def test_a_budget_refuses_a_bad_node_cost(cost: float) -> None:
    with pytest.raises(ValueError, match="node cost"):
        TreeBudget(8, 5, 4, node_cost=cost)


def test_the_costs_cross_the_wire() -> None:
    budget = TreeBudget(12, 11, 10, node_cost=0.0625, tree_cost=0.125)
    assert budget_from_proto(budget_to_proto(budget)) == budget
    absent = budget_from_proto(budget_to_proto(TreeBudget(8, 5, 4)))
    assert absent.node_cost == 0.0 and absent.tree_cost == 0.0

"""SGLang's tree-budget flags, whose defaults depend on the algorithm (the n-gram drafter's are its own)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from treespec.shared.cli.arg_types import non_negative_float, positive_int

GENERIC_DEFAULTS = (5, 4, 8)  # num_steps, eagle_topk, num_draft_tokens (SGLang's)


@dataclass(frozen=True)
class BudgetFlags:
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    node_cost: float | None = None  # None: the verifier measures it
    tree_cost: float | None = None  # with node_cost only (None: 0); None and no node_cost: measured


def add_budget_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--speculative-num-steps",
        type=positive_int,
        help="tree depth (default: 5; NGRAM: num_draft_tokens - 1)",
    )
    parser.add_argument(
        "--speculative-eagle-topk",
        type=positive_int,
        help="children per node (default: 4; NGRAM: --speculative-ngram-max-bfs-breadth)",
    )
    parser.add_argument(
        "--speculative-num-draft-tokens",
        type=positive_int,
        help="tree nodes, root included (default: 8; NGRAM: --speculative-ngram-max-match-window-size)",
    )
    add_cost_arguments(parser)


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--speculative-node-cost",
        type=non_negative_float,
        help="what verifying one more draft node costs, as a fraction of a decoding step; drafters keep "
        "only nodes that pay for it (default: measured by the verifier as it starts; 0: nodes are free)",
    )
    parser.add_argument(
        "--speculative-tree-cost",
        type=non_negative_float,
        help="what verifying a tree at all costs on top of its nodes, in the same unit; with "
        "--speculative-node-cost only (default: 0 with it, else measured with the node cost)",
    )


def check_costs(node_cost: float | None, tree_cost: float | None) -> None:
    """Raise ValueError for a tree cost without a node cost (the two are measured together)."""
    if tree_cost is not None and node_cost is None:
        raise ValueError("--speculative-tree-cost needs --speculative-node-cost (else both are measured)")


def resolve_budget(ns: argparse.Namespace, algorithm: str, ngram_options: dict[str, Any]) -> BudgetFlags:
    """The flags given, else the algorithm's defaults."""
    return default_budget(
        algorithm,
        ngram_options,
        num_steps=ns.speculative_num_steps,
        eagle_topk=ns.speculative_eagle_topk,
        num_draft_tokens=ns.speculative_num_draft_tokens,
        node_cost=ns.speculative_node_cost,
        tree_cost=ns.speculative_tree_cost,
    )


def default_budget(
    algorithm: str,
    ngram_options: dict[str, Any] | None = None,
    num_steps: int | None = None,
    eagle_topk: int | None = None,
    num_draft_tokens: int | None = None,
    node_cost: float | None = None,
    tree_cost: float | None = None,
) -> BudgetFlags:
    """Values given win; the rest are the algorithm's defaults. NGRAM (as SGLang): num_draft_tokens is
    the max match window, the depth may use all of it (a chain), the breadth is the max BFS breadth.
    Raises ValueError for a tree cost without a node cost."""
    check_costs(node_cost, tree_cost)
    steps, topk, nodes = GENERIC_DEFAULTS
    if algorithm.lower() == "ngram":
        from treespec.drafter.ngram.config import NgramConfig

        budget = NgramConfig.from_options(ngram_options or {}).default_budget()
        nodes = num_draft_tokens or budget.num_draft_tokens
        steps, topk = nodes - 1, budget.topk
    return BudgetFlags(
        num_steps=steps if num_steps is None else num_steps,
        eagle_topk=topk if eagle_topk is None else eagle_topk,
        num_draft_tokens=nodes if num_draft_tokens is None else num_draft_tokens,
        node_cost=node_cost,
        tree_cost=tree_cost,
    )

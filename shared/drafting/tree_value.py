"""How many draft nodes are worth verifying, given what one more verify row costs.

A verify step over a tree of n drafted nodes commits 1 + (the summed acceptance probabilities of
the nodes, each the probability that its whole path is accepted) tokens on average, and costs
1 + tree_cost + node_cost * n of a step with the root alone (TreeBudget.tree_cost and node_cost,
measured by the verifier): a fixed part for verifying a tree at all (on a CPU the first extra row
costs more than the later ones: attention over the whole context turns from one query into several),
then a part per node. A step without draft nodes costs 1.
Given nodes ranked best first, with every parent ranked before its children, a drafter keeps the
prefix that maximises tokens per unit of time. On a GPU at small batches node_cost is near 0 and
every node stays; on a CPU a node must be likely enough to pay for its row.
"""

from __future__ import annotations

from collections.abc import Sequence


def nodes_worth_verifying(path_probs: Sequence[float], node_cost: float, tree_cost: float = 0.0) -> int:
    """The n maximising (1 + sum(path_probs[:n])) / (1 + tree_cost + node_cost * n), or 0 (a rate of 1)
    when none beats a plain step; `path_probs` best first. Ties go to the larger n, so that with both
    costs 0 every node is kept."""
    best_n, best_rate = 0, 1.0
    tokens = 1.0
    for n, p in enumerate(path_probs, start=1):
        tokens += p
        rate = tokens / (1.0 + tree_cost + node_cost * n)
        if rate >= best_rate:
            best_n, best_rate = n, rate
    return best_n

"""TokenTree <-> its protobuf message."""

from __future__ import annotations

import torch

from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.v1 import common_pb2


def tree_to_proto(tree: TokenTree) -> common_pb2.TokenTree:
    return common_pb2.TokenTree(
        tokens=tree.tokens.tolist(),
        parents=tree.parents.tolist(),
        probs=tree.probs.tolist() if tree.probs is not None else [],
    )


def tree_from_proto(message: common_pb2.TokenTree) -> TokenTree:
    """Shapes and values are checked later by the verifier (kernels.tree_mask.validate_tree)."""
    probs = torch.tensor(list(message.probs), dtype=torch.float32) if len(message.probs) else None
    return TokenTree(
        torch.tensor(list(message.tokens), dtype=torch.long),
        torch.tensor(list(message.parents), dtype=torch.long),
        probs,
    )


def budget_to_proto(budget: TreeBudget) -> common_pb2.TreeBudget:
    return common_pb2.TreeBudget(
        num_draft_tokens=budget.num_draft_tokens,
        num_steps=budget.num_steps,
        topk=budget.topk,
        node_cost=budget.node_cost,
        tree_cost=budget.tree_cost,
    )


def budget_from_proto(message: common_pb2.TreeBudget) -> TreeBudget:
    """Raises ValueError for a budget with a zero count or a negative or non-finite node or tree cost."""
    return TreeBudget(
        num_draft_tokens=message.num_draft_tokens,
        num_steps=message.num_steps,
        topk=message.topk,
        node_cost=message.node_cost,
        tree_cost=message.tree_cost,
    )

"""Token trees as parent arrays: depths, the ancestor (attention) mask, and validation.

A tree of n nodes is `parents: LongTensor[n]` with parents[0] == -1 (the root) and
0 <= parents[i] < i for i > 0, so parents come before children. Depths and masks are vectorised with
pointer jumping: their Python loops run O(log max_depth) times, never once per node; on a CPU the
ancestor mask of such a tree walks it node by node instead, cheaper for trees of tens of nodes.
Validation walks the parent array in Python (see validate_tree).
"""

from __future__ import annotations

import math

import numpy as np
import torch

# Tolerance on "the children's draft probabilities sum to 1": drafters compute them in low precision.
PROB_SUM_TOLERANCE = 1e-3


def tree_depths(parents: torch.Tensor) -> torch.Tensor:
    """Depth of every node (root 0).

    parents: LongTensor[n], a valid parent array (see module docstring).
    Returns LongTensor[n] on the same device.
    """
    # Pointer jumping: `jump[i]` is the 2^k-th ancestor of i (-1 past the root) and `depth[i]` counts
    # the edges already walked from i. Each round doubles the walked distance, so the loop runs
    # ceil(log2(max_depth + 1)) times.
    jump = parents.clone()
    depth = (parents >= 0).long()
    while bool((jump >= 0).any()):
        alive = jump >= 0
        safe = jump.clamp(min=0)
        depth = depth + torch.where(alive, depth[safe], 0)
        jump = torch.where(alive, jump[safe], -1)
    return depth


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """mask[i, j] is True iff j == i or j is an ancestor of i: which tree tokens node i attends to.

    parents: LongTensor[n], a valid parent array. Returns BoolTensor[n, n] on the same device; a chain
    (parents = [-1, 0, 1, ...]) gives the lower-triangular (causal) mask.
    """
    if parents.device.type == "cpu":
        order = parents.tolist()
        if all(parent < i for i, parent in enumerate(order)):
            return _walked_ancestor_mask(order)
    n = parents.shape[0]
    # Invariant: row i of `mask` holds i's ancestors at distance < 2^k, `jump[i]` its 2^k-th ancestor.
    # Row i at distance < 2^(k+1) = row i at < 2^k OR row jump[i] at < 2^k.
    mask = torch.eye(n, dtype=torch.bool, device=parents.device)
    jump = parents.clone()
    while bool((jump >= 0).any()):
        alive = jump >= 0
        safe = jump.clamp(min=0)
        mask = mask | (mask[safe] & alive[:, None])
        jump = torch.where(alive, jump[safe], -1)
    return mask


def _walked_ancestor_mask(parents: list[int]) -> torch.Tensor:
    """The ancestor mask on a CPU, walking the nodes in order (parents first, so each row is its
    parent's row and itself): one row OR per node, about a microsecond each, where every pointer-jumping
    round costs several tensor operations (8 nodes: about 10 us against 90)."""
    rows = np.eye(len(parents), dtype=np.bool_)
    for i, parent in enumerate(parents):
        if parent >= 0:
            rows[i] |= rows[parent]
    return torch.from_numpy(rows)


def is_chain(parents: torch.Tensor) -> bool:
    """True when every node's parent is the node before it (a plain sequence, no branching)."""
    expected = torch.arange(-1, parents.shape[0] - 1, device=parents.device)
    return bool(torch.equal(parents, expected))


def validate_tree(
    tokens: torch.Tensor,
    parents: torch.Tensor,
    probs: torch.Tensor | None,
    *,
    vocab_size: int,
    max_nodes: int,
    max_depth: int,
    max_children: int,
) -> str | None:
    """None when the tree is well formed and within budget, else a short reason to report.

    tokens, parents: LongTensor[n]; probs: FloatTensor[n] (draft probability of each node's token given
    its parent; the root's entry is ignored) or None. Depth counts edges below the root, so a root
    with one chain of k drafted tokens has depth k.
    Checked in an order where each check may rely on the earlier ones (depths need valid parents).
    The verifier runs this on every tree every step, and trees are small (tens of nodes): the checks
    read each tensor once into a Python list and walk it, which costs a few microseconds where a
    dozen tensor operations cost a few hundred.
    """
    reason = _check_shapes(tokens, parents)
    if reason is None:
        if parents.shape[0] > max_nodes:
            return f"{parents.shape[0]} nodes exceed the limit of {max_nodes}"
        reason = _check_structure(tokens.tolist(), parents.tolist(), vocab_size, max_depth, max_children)
    if reason is None and probs is not None:
        reason = _check_probs(parents, probs)
    return reason


def _check_shapes(tokens: torch.Tensor, parents: torch.Tensor) -> str | None:
    if tokens.dim() != 1 or parents.dim() != 1:
        return f"tokens and parents must be 1-D, got shapes {tuple(tokens.shape)} and {tuple(parents.shape)}"
    if tokens.shape != parents.shape:
        return f"tokens ({tokens.shape[0]}) and parents ({parents.shape[0]}) differ in length"
    if tokens.shape[0] < 1:
        return "the tree is empty (it needs at least the root)"
    if tokens.is_floating_point() or parents.is_floating_point():
        return "tokens and parents must be integer tensors"
    return None


def _check_structure(
    tokens: list[int], parents: list[int], vocab_size: int, max_depth: int, max_children: int
) -> str | None:
    if parents[0] != -1:
        return f"parents[0] must be -1 (the root), got {parents[0]}"
    for i, parent in enumerate(parents[1:], start=1):
        if not 0 <= parent < i:
            return f"node {i} has parent {parent}; a parent must be an earlier node"
    for i, token in enumerate(tokens):
        if not 0 <= token < vocab_size:
            return f"node {i} has token {token} outside the vocabulary [0, {vocab_size})"
    depths = [0] * len(parents)
    for i, parent in enumerate(parents[1:], start=1):
        depths[i] = depths[parent] + 1  # parents come first: theirs is known
    if max(depths) > max_depth:
        return f"depth {max(depths)} exceeds the limit of {max_depth}"
    children = [0] * len(parents)
    for parent in parents[1:]:
        children[parent] += 1
    most = max(children)
    if most > max_children:
        return f"node {children.index(most)} has {most} children, more than the limit of {max_children}"
    # Siblings share a parent; a (parent, token) pair seen twice is a duplicated sibling token, which
    # would let one continuation be tried twice and break the acceptance rule's bookkeeping.
    if len(set(zip(parents[1:], tokens[1:], strict=True))) != len(parents) - 1:
        return "two siblings carry the same token"
    return None


def _check_probs(parents: torch.Tensor, probs: torch.Tensor) -> str | None:
    n = parents.shape[0]
    if probs.dim() != 1 or probs.shape[0] != n:
        return f"probs must have shape ({n},), got {tuple(probs.shape)}"
    if not probs.is_floating_point():
        return "probs must be a floating-point tensor"
    # The root's entry is ignored: the root is already accepted, nobody drafted it.
    child = probs[1:].tolist()
    if not all(math.isfinite(p) for p in child):
        return "probs contain a non-finite value"
    if not all(0.0 <= p <= 1.0 for p in child):
        return "probs must lie in [0, 1]"
    # The siblings are the drafter's whole proposal distribution at their parent: it must sum to 1.
    sums: dict[int, float] = {}
    for parent, p in zip(parents[1:].tolist(), child, strict=True):
        sums[parent] = sums.get(parent, 0.0) + p
    for node in sorted(sums):
        if abs(sums[node] - 1) > PROB_SUM_TOLERANCE:
            return f"the children of node {node} have draft probabilities summing to {sums[node]:.4f}, not 1"
    return None

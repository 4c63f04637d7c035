"""What the verifier made of a drafted tree: which nodes were accepted, read off the committed tokens."""

from __future__ import annotations

from collections.abc import Sequence

from treespec.drafter.ngram.calibration import NodeKind
from treespec.drafter.ngram.tree_builder import DraftedTree


def tree_outcomes(drafted: DraftedTree, committed: Sequence[int]) -> list[tuple[NodeKind, bool]]:
    """One outcome per node whose parent was accepted: was the node accepted too?

    The committed run is the accepted path followed by the bonus token, so walking it down the tree
    from the root visits exactly the accepted nodes; the children of the deepest one were all rejected.
    """
    tokens = drafted.tree.tokens.tolist()
    parents = drafted.tree.parents.tolist()
    children: dict[int, list[int]] = {}
    for node, parent in enumerate(parents[1:], start=1):
        children.setdefault(parent, []).append(node)
    outcomes: list[tuple[NodeKind, bool]] = []
    current = 0
    for token in committed:
        accepted_child = None
        for child in children.get(current, []):
            kind = drafted.kinds[child]
            if kind is not None:
                outcomes.append((kind, tokens[child] == token))
            if tokens[child] == token:
                accepted_child = child
        if accepted_child is None:
            break
        current = accepted_child
    return outcomes

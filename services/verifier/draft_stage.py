"""Step 2: ask the drafter for a tree per decoding request; anything wrong means plain decoding."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from treespec.kernels.tree_mask import validate_tree
from treespec.shared.drafting.drafter import Drafter, DraftQuery
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.warn_once import WarnOnce
from treespec.verifier.state import RequestState

log = logging.getLogger(__name__)


@dataclass
class DraftStage:
    drafter: Drafter | None
    vocab_size: int
    _warn_once: WarnOnce = field(default_factory=lambda: WarnOnce(log))

    def trees(
        self, decodes: list[RequestState], node_cost: float = 0.0, tree_cost: float = 0.0
    ) -> dict[str, TokenTree]:
        """Validated trees by request id; requests without one decode plainly this step. `node_cost`,
        `tree_cost`: what verifying one more node, and a tree at all, costs this step (verify_cost.py)."""
        wanting = [s for s in decodes if s.speculation.enabled and s.speculation.num_draft_tokens > 1]
        if self.drafter is None or not wanting:
            return {}
        queries = [DraftQuery(s.request_id, s.speculation.tree_budget(node_cost, tree_cost)) for s in wanting]
        try:
            proposals = self.drafter.propose(queries)
        except Exception as exc:  # a failing drafter costs speed, never a request
            self._warn_once("propose", f"drafter failed, decoding plainly: {exc!r}")
            return {}
        trees: dict[str, TokenTree] = {}
        for state, tree in zip(wanting, proposals, strict=False):
            if tree is not None and self._acceptable(state, tree):
                trees[state.request_id] = tree
        return trees

    def _acceptable(self, state: RequestState, tree: TokenTree) -> bool:
        budget = state.speculation.budget
        problem = validate_tree(
            tree.tokens,
            tree.parents,
            tree.probs,
            vocab_size=self.vocab_size,
            max_nodes=budget.num_draft_tokens,
            max_depth=budget.num_steps,
            max_children=budget.topk,
        )
        if problem is None and int(tree.tokens[0]) != state.tokens[-1]:
            problem = "root token is not the request's last token"
        if problem is not None:
            self._warn_once("tree", f"dropping an invalid draft tree: {problem}")
            return False
        return True

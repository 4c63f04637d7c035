"""Step 2: a tree per decoding request, from its predicted output or the drafter; anything wrong means
plain decoding."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from treespec.kernels.tree_mask import validate_tree
from treespec.shared.drafting.drafter import Drafter, DraftQuery
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.warn_once import WarnOnce
from treespec.verifier.state import RequestState

log = logging.getLogger(__name__)


@dataclass
class DraftStage:
    drafter: Drafter | None
    vocab_size: int
    context_length: int  # a request's tokens at most: no chain drafts past it
    _warn_once: WarnOnce = field(default_factory=lambda: WarnOnce(log))

    def trees(
        self,
        decodes: list[RequestState],
        node_cost: float = 0.0,
        tree_cost: float = 0.0,
        ask_drafter: bool = True,
    ) -> dict[str, TokenTree]:
        """Validated trees by request id; requests without one decode plainly this step. `node_cost`,
        `tree_cost`: what verifying one more node, and a tree at all, costs this step (verify_cost.py);
        `ask_drafter` False: chains from predicted outputs only (speculation_gate.py)."""
        trees = self._predicted(decodes, node_cost, tree_cost)
        if not ask_drafter:
            return trees
        wanting = [
            s
            for s in decodes
            if s.speculation.enabled and s.speculation.num_draft_tokens > 1 and s.request_id not in trees
        ]
        if self.drafter is None or not wanting:
            return trees
        queries = [DraftQuery(s.request_id, s.speculation.tree_budget(node_cost, tree_cost)) for s in wanting]
        try:
            proposals = self.drafter.propose(queries)
        except Exception as exc:  # a failing drafter costs speed, never a request
            self._warn_once("propose", f"drafter failed, decoding plainly: {exc!r}")
            return trees
        for state, tree in zip(wanting, proposals, strict=False):
            if tree is not None and self._acceptable(state, tree, state.speculation.budget):
                trees[state.request_id] = tree
                if state.prediction is not None:
                    state.prediction.used_tree()
        return trees

    def _predicted(
        self, decodes: list[RequestState], node_cost: float, tree_cost: float
    ) -> dict[str, TokenTree]:
        """Chains from the requests' predicted outputs, where one is expected to commit more than the
        drafter's trees (prediction.py). A request with a prediction drafts from it even where
        speculation is off (no drafter), up to its own rows (the verifier's prediction_draft_tokens)."""
        chains: dict[str, TokenTree] = {}
        for state in decodes:
            prediction = state.prediction
            if prediction is None:
                continue
            prediction.follow(state.tokens, state.num_prompt)
            rows = prediction.max_rows
            budget = TreeBudget(rows, rows - 1, 1, node_cost, tree_cost)
            room = min(
                state.request.sampling.max_new_tokens - state.num_output,
                self.context_length - len(state.tokens),
            )
            chain = prediction.chain(state.tokens, state.num_prompt, budget, room)
            if chain is not None and self._acceptable(state, chain, budget):
                chains[state.request_id] = chain
        return chains

    def _acceptable(self, state: RequestState, tree: TokenTree, budget: TreeBudget) -> bool:
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

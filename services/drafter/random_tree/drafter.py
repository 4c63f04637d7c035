"""Random trees within the budget: exercises rejection paths and tree shapes (tests, measurement)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from treespec.shared.drafting.drafter import Drafter, DrafterContext, DraftQuery
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget


@dataclass
class _History:
    length: int
    last: int


class RandomTreeDrafter(Drafter):
    """Trees of random shape and tokens, as large as the budget allows.

    The randomness is a function of the drafter's seed and the request's history (its length and last
    token), not of other traffic: the same context gets the same tree, so a seeded sampling request
    reproduces whatever else the server is doing. With `with_probs`, each parent's children get random
    draft probabilities and are ordered as a draw without replacement from them, which is exactly what
    kernels/acceptance.py requires of such drafts.
    """

    def __init__(self, vocab_size: int, seed: int = 0, with_probs: bool = False) -> None:
        self.vocab_size = vocab_size
        self.seed = seed
        self.with_probs = with_probs
        self._histories: dict[str, _History] = {}

    @classmethod
    def create(cls, context: DrafterContext) -> RandomTreeDrafter:
        return cls(context.vocab_size, **context.options)

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        self._histories[request_id] = _History(len(prompt), prompt[-1])

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        history = self._histories[request_id]
        if tokens:
            history.length += len(tokens)
            history.last = tokens[-1]

    def close(self, request_id: str) -> None:
        self._histories.pop(request_id, None)

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        return [self._tree(self._histories[q.request_id], q.budget) for q in queries]

    def _tree(self, history: _History, budget: TreeBudget) -> TokenTree:
        generator = torch.Generator().manual_seed(
            hash((self.seed, history.length, history.last)) & (2**62 - 1)
        )
        parents = self._shape(budget, generator)
        n = len(parents)
        tokens = [history.last] + [0] * (n - 1)
        probs = [1.0] * n
        for parent in range(n):
            kids = [c for c in range(1, n) if parents[c] == parent]
            if kids:
                self._fill_siblings(kids, tokens, probs, generator)
        return TokenTree(
            torch.tensor(tokens, dtype=torch.long),
            torch.tensor(parents, dtype=torch.long),
            torch.tensor(probs, dtype=torch.float32) if self.with_probs else None,
        )

    @staticmethod
    def _shape(budget: TreeBudget, generator: torch.Generator) -> list[int]:
        parents, depth, kids = [-1], [0], [0]
        for _ in range(budget.num_draft_tokens - 1):
            open_nodes = [
                i for i in range(len(parents)) if depth[i] < budget.num_steps and kids[i] < budget.topk
            ]
            if not open_nodes:
                break
            p = open_nodes[int(torch.randint(len(open_nodes), (), generator=generator))]
            parents.append(p)
            depth.append(depth[p] + 1)
            kids[p] += 1
            kids.append(0)
        return parents

    def _fill_siblings(
        self, kids: list[int], tokens: list[int], probs: list[float], generator: torch.Generator
    ) -> None:
        k = min(len(kids), self.vocab_size)
        choice = torch.randperm(self.vocab_size, generator=generator)[:k]
        weights = _dirichlet(k, generator)
        # The children's order is a draw without replacement from their draft probabilities.
        order = torch.multinomial(weights, k, replacement=False, generator=generator)
        for child, j in zip(kids, order.tolist(), strict=False):
            tokens[child] = int(choice[j])
            probs[child] = float(weights[j])


def _dirichlet(k: int, generator: torch.Generator) -> torch.Tensor:
    """A flat Dirichlet sample from `generator` (normalised exponentials)."""
    draws = -torch.rand(k, generator=generator).clamp_min(1e-12).log()
    return draws / draws.sum()

"""Replays a known continuation: the ceiling a perfect drafter would reach (tests, measurement)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from treespec.shared.drafting.drafter import Drafter, DrafterContext, DraftQuery
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget


@dataclass
class _Track:
    continuation: Sequence[int] | None  # expected output tokens, None when the prompt is unknown
    produced: int = 0  # output tokens committed so far
    on_track: bool = True  # every committed token equalled the continuation's
    last: int = 0


class OracleDrafter(Drafter):
    """The tree holds the next `num_steps` tokens of the known continuation as its main chain; the rest
    of the node budget goes to random side branches (so the forward does the work of a full tree).
    `error_rate` replaces chain tokens by random ones, to exercise partial acceptance."""

    def __init__(
        self,
        continuations: Mapping[tuple[int, ...], Sequence[int]],
        vocab_size: int,
        seed: int = 0,
        error_rate: float = 0.0,
    ) -> None:
        self.continuations = continuations
        self.vocab_size = vocab_size
        self.error_rate = error_rate
        self.seed = seed
        self._tracks: dict[str, _Track] = {}

    @classmethod
    def create(cls, context: DrafterContext) -> OracleDrafter:
        if "continuations" not in context.options:
            raise ValueError("the oracle drafter needs `continuations` (prompt ids -> expected output ids)")
        return cls(vocab_size=context.vocab_size, **context.options)

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        self._tracks[request_id] = _Track(self.continuations.get(tuple(prompt)), last=prompt[-1])

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        track = self._tracks[request_id]
        if track.continuation is not None:
            expected = list(track.continuation[track.produced : track.produced + len(tokens)])
            track.on_track = track.on_track and expected == list(tokens)
        track.produced += len(tokens)
        track.last = tokens[-1]

    def close(self, request_id: str) -> None:
        self._tracks.pop(request_id, None)

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        return [self._tree(self._tracks[q.request_id], q.budget) for q in queries]

    def _tree(self, track: _Track, budget: TreeBudget) -> TokenTree | None:
        if track.continuation is None or not track.on_track:
            return None
        length = min(budget.num_steps, budget.num_draft_tokens - 1)
        chain = list(track.continuation[track.produced : track.produced + length])
        if not chain:
            return None
        # Randomness from the request's position, not from other traffic: the same context, the same tree.
        generator = torch.Generator().manual_seed(hash((self.seed, track.produced, track.last)) & (2**62 - 1))
        chain = [self._maybe_corrupt(t, generator) for t in chain]
        tokens, parents = [track.last, *chain], list(range(-1, len(chain)))
        self._add_side_branches(tokens, parents, budget, generator)
        return TokenTree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long))

    def _maybe_corrupt(self, token: int, generator: torch.Generator) -> int:
        if self.error_rate and float(torch.rand((), generator=generator)) < self.error_rate:
            return int(torch.randint(self.vocab_size, (), generator=generator))
        return token

    def _add_side_branches(
        self, tokens: list[int], parents: list[int], budget: TreeBudget, generator: torch.Generator
    ) -> None:
        """Fill the node budget with random leaves under chain nodes that have room for siblings."""
        chain_len = len(tokens)
        for node in range(chain_len - 1):
            if len(tokens) >= budget.num_draft_tokens:
                return
            siblings = {tokens[c] for c in range(len(tokens)) if parents[c] == node}
            while len(siblings) < budget.topk and len(tokens) < budget.num_draft_tokens:
                token = int(torch.randint(self.vocab_size, (), generator=generator))
                if token not in siblings:
                    siblings.add(token)
                    tokens.append(token)
                    parents.append(node)

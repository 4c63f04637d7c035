"""Compare two greedy continuations under the near-tie rule.

Two correct implementations of the same model may still part ways where the target's two best
logits are nearly equal: rounding decides. A divergence is therefore accepted only where the
top-2 logit gap, measured on the common prefix, is below the tolerance; after it nothing is compared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

NEAR_TIE_GAP = 1e-3

# prompt + tokens -> the model's logits for the next token, [vocab]
NextLogits = Callable[[list[int]], torch.Tensor]


@dataclass(frozen=True)
class GreedyMatch:
    identical: bool
    diverged_at: int | None  # index into the continuations of the first difference
    gap: float | None  # the reference's top-2 logit gap there

    @property
    def ok(self) -> bool:
        return self.identical or (self.gap is not None and self.gap < NEAR_TIE_GAP)


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_greedy(
    prompt: Sequence[int], got: Sequence[int], want: Sequence[int], next_logits: NextLogits
) -> GreedyMatch:
    at = first_divergence(got, want)
    if at is None:
        return GreedyMatch(True, None, None)
    if at >= min(len(got), len(want)):
        # One stopped earlier (EOS or a limit) with identical tokens up to there: not a near-tie.
        return GreedyMatch(False, at, None)
    top2 = next_logits([*prompt, *want[:at]]).float().topk(2).values
    return GreedyMatch(False, at, float(top2[0] - top2[1]))


def hf_next_logits(model: torch.nn.Module) -> NextLogits:
    """next-token logits from a Hugging Face causal LM."""

    def run(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0, -1]

    return run

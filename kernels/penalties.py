"""Presence, frequency and repetition penalties on a request's tree rows.

A penalty depends on the text so far, and a tree row's text so far is the request's tokens plus the
drafted path down to that row's node: each row is penalised for its own path, so that verification
sees exactly the distribution plain decoding would sample from after that path (lossless).

The rules and their order are vLLM's: first repetition (transformers' CTRL rule), over prompt and
output: a seen token's positive logit is divided by the penalty, a negative one multiplied by it;
then OpenAI's presence and frequency, over the output tokens only: logit - frequency * count -
presence * [count > 0].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from treespec.kernels.tree_mask import ancestor_mask


@dataclass(frozen=True)
class Penalties:
    presence: float = 0.0
    frequency: float = 0.0
    repetition: float = 1.0

    @property
    def active(self) -> bool:
        return self.presence != 0.0 or self.frequency != 0.0 or self.repetition != 1.0


def penalize_tree_rows(
    logits: torch.Tensor,
    penalties: Penalties,
    prompt: list[int],
    output: list[int],
    tree_tokens: torch.Tensor,
    parents: torch.Tensor,
) -> torch.Tensor:
    """logits: [n, V], the rows of a tree's n nodes (node 0, the root, is the last of `output`, or of
    `prompt` before any output). Returns the penalised rows (a new tensor)."""
    n, vocab = logits.shape
    device = logits.device
    counts = torch.zeros(n, vocab, dtype=torch.float32, device=device)
    if output:
        counts += torch.bincount(torch.tensor(output, device=device), minlength=vocab)[:vocab].float()
    if n > 1:  # each row also counts the drafted tokens on its path (root excluded: it is in `output`)
        path = ancestor_mask(parents.to(device))
        path[:, 0] = False
        rows, nodes = path.nonzero(as_tuple=True)
        ones = torch.ones(rows.shape[0], dtype=torch.float32, device=device)
        counts.index_put_((rows, tree_tokens.to(device)[nodes]), ones, accumulate=True)
    out = logits.float()
    if penalties.repetition != 1.0:
        seen = counts > 0
        if prompt:
            seen[:, torch.tensor(prompt, device=device)] = True
        scaled = torch.where(out > 0, out / penalties.repetition, out * penalties.repetition)
        out = torch.where(seen, scaled, out)
    return out - penalties.frequency * counts - penalties.presence * (counts > 0).float()

"""OpenAI's `logit_bias`: fixed amounts added to chosen tokens' logits, on every row of a request.

It does not depend on the text so far, so every tree row gets the same bias and verification stays
lossless. It comes before the penalties (kernels/penalties.py), as in vLLM.
"""

from __future__ import annotations

import torch


def apply_logit_bias(logits: torch.Tensor, bias: tuple[tuple[int, float], ...]) -> torch.Tensor:
    """logits: [n, V]; bias: (token id, amount) pairs. Returns a new tensor."""
    out = logits.float().clone()
    if bias:
        ids = torch.tensor([t for t, _ in bias], dtype=torch.long, device=out.device)
        amounts = torch.tensor([a for _, a in bias], dtype=torch.float32, device=out.device)
        out[:, ids] += amounts
    return out

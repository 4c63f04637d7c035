"""FR-Spec: restrict an EAGLE-2 head's lm_head to a list of frequent ("hot") target tokens."""

from __future__ import annotations

from pathlib import Path

import torch


def load_token_map(path: str | Path, vocab_size: int) -> torch.Tensor:
    """A .pt file holding a list or a 1-D tensor of target ids -> LongTensor[n] (unique, in range)."""
    try:
        raw = torch.load(Path(path).expanduser(), map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError) as exc:
        raise ValueError(f"cannot read the token map {path}: {exc}") from exc
    ids = torch.as_tensor(raw)
    if ids.dim() != 1 or ids.numel() == 0 or ids.is_floating_point():
        raise ValueError(f"the token map {path} must be a non-empty list or 1-D tensor of token ids")
    ids = ids.long()
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise ValueError(f"the token map {path} has ids outside [0, {vocab_size})")
    if ids.unique().numel() != ids.numel():
        raise ValueError(f"the token map {path} repeats ids")
    return ids


def restricted_lm_head(embed: torch.Tensor, hot: torch.Tensor) -> torch.Tensor:
    """The lm_head rows of the hot ids, dense [hidden, n] for `linear`. The rows are read from the
    target's embedding, which is the lm_head of a tied model."""
    return embed[hot.to(embed.device)].t().contiguous()

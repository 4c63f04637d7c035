"""The target's sampling distribution: logits -> probabilities after temperature, top-k, top-p, min-p.

Acceptance is lossless with respect to exactly this distribution, so it must match what a plain
decoding server would sample from. The order is vLLM's (and transformers' warpers'): temperature,
then top-k, then top-p on the renormalised top-k distribution, then min-p relative to the most
probable token. SGLang's torch sampler measures top-p on the distribution before top-k instead; the
two agree whenever top-k is off.

Ties are kept, never broken by position: every filter keeps a token iff its value reaches a
per-row threshold, so tokens with equal logits are kept or dropped together and the result does not
depend on the vocabulary order (or on how a sort orders equal values). A row may therefore keep more
than top_k tokens when several tie at the k-th largest logit.
"""

from __future__ import annotations

import torch

# How many of a row's largest probabilities top-p looks at, in turn, before it sorts the whole row.
NUCLEUS_WIDTHS = (256, 4096)


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """Argmax per row: FloatTensor[R, V] -> LongTensor[R] (ties: the lowest token id)."""
    return logits.argmax(dim=-1)


def probs_from_logits(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
) -> torch.Tensor:
    """Per-row sampling distribution, FloatTensor[R, V] float32, every row summing to 1.

    logits: FloatTensor[R, V] (any float dtype); per-row parameters, all of shape [R] on logits' device:
      temperature: float, > 0 (a row with temperature <= 0 gets a one-hot at its argmax, the greedy limit);
      top_k: long, <= 0 or >= V disables it;
      top_p: float in (0, 1], 1 disables it; keeps the smallest prefix (by descending probability) whose
        mass reaches top_p, plus ties of its last token; never fewer than one token;
      min_p: float in [0, 1], 0 disables it; drops tokens below min_p * (largest probability).

    No row is sorted whole unless its nucleus is wider than NUCLEUS_WIDTHS allow: a full sort of a
    49,152-token row takes milliseconds on a CPU, a hundred times the softmax, and a verify step
    computes one row per tree node (SmolLM2 at temperature 1 and top-p 0.95 kept a median of 15 tokens,
    at most 2,858, over 64 positions of a chat answer).
    """
    vocab = logits.shape[-1]
    sampled = temperature > 0
    # Greedy rows (temperature <= 0) are replaced at the end; the clamp only keeps them finite here.
    scaled = logits.float() / temperature.float().clamp(min=1e-6)[:, None]
    scaled = _top_k(scaled, torch.where(sampled & (top_k > 0) & (top_k < vocab), top_k, 0))
    probs = torch.softmax(scaled, dim=-1)
    nucleus = torch.where(sampled, top_p, 1.0)
    if bool((nucleus < 1).any() | (min_p > 0).any()):
        probs = torch.where(_top_p(probs, nucleus) & _min_p(probs, min_p), probs, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if bool(sampled.all()):
        return probs
    greedy = torch.nn.functional.one_hot(greedy_tokens(logits), vocab).float()
    return torch.where(sampled[:, None], probs, greedy)


def _top_k(scaled: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) every logit below its row's k-th largest, in rows with k > 0."""
    rows = (k > 0).nonzero().flatten()
    if rows.numel() == 0:
        return scaled
    ks = k[rows]
    kth = torch.full_like(scaled[:, :1], float("-inf"))
    kth[rows] = scaled[rows].topk(int(ks.max()), dim=-1).values.gather(-1, (ks - 1)[:, None])
    return scaled.masked_fill(scaled < kth, float("-inf"))


def _top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """BoolTensor[R, V]: the nucleus of each row with top_p < 1 (probabilities already top-k'd)."""
    threshold = torch.zeros_like(probs[:, :1])  # rows without top-p keep every token
    open_rows = (top_p < 1).nonzero().flatten()
    for width in (*(w for w in NUCLEUS_WIDTHS if w < probs.shape[-1]), probs.shape[-1]):
        if open_rows.numel() == 0:
            break
        found, closed = _nucleus_threshold(probs[open_rows], top_p[open_rows], width)
        threshold[open_rows] = found
        open_rows = open_rows[~closed]
    return probs >= threshold


def _nucleus_threshold(
    probs: torch.Tensor, top_p: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's smallest kept probability under top-p, [R, 1], found among its `width` largest; and
    [R] bool: whether the nucleus closes within them (always, when `width` is the whole row)."""
    # Token i is in the nucleus iff the mass strictly before it is < top_p, i.e. the prefix that ends
    # with it is the first to reach top_p. That set is a prefix (the exclusive cumsum only grows) and
    # always holds token 0. Ties of its last token are added by thresholding on that token's value.
    largest = probs.topk(width, dim=-1).values
    through = torch.cumsum(largest, dim=-1)
    in_prefix = (through - largest) < top_p[:, None]
    in_prefix[:, 0] = True
    last = in_prefix.sum(dim=-1, keepdim=True) - 1
    closed = (through[:, -1] >= top_p) | (width >= probs.shape[-1]) | ~in_prefix[:, -1]
    return largest.gather(-1, last), closed


def _min_p(probs: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """BoolTensor[R, V]: tokens at least min_p times as probable as the row's most probable one.

    Computed on the top-k distribution, before top-p: the most probable token survives top-p and a
    ratio to it is unchanged by renormalisation, so the set equals min-p applied after top-p.
    """
    return probs >= min_p[:, None] * probs.amax(dim=-1, keepdim=True)

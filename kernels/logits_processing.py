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
    """
    vocab = logits.shape[-1]
    # Greedy rows (temperature <= 0) are replaced at the end; the clamp only keeps them finite here.
    scaled = logits.float() / temperature.float().clamp(min=1e-6)[:, None]
    # One descending sort serves every filter: each keeps a prefix of the sorted row (plus ties).
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    sorted_logits = _top_k(sorted_logits, top_k, vocab)
    sorted_probs = torch.softmax(sorted_logits, dim=-1)
    keep = _top_p(sorted_probs, top_p) & _min_p(sorted_probs, min_p)
    sorted_probs = torch.where(keep, sorted_probs, 0.0)
    probs = torch.zeros_like(sorted_probs).scatter_(-1, order, sorted_probs)
    probs = probs / probs.sum(dim=-1, keepdim=True)
    greedy = torch.nn.functional.one_hot(greedy_tokens(logits), vocab).float()
    return torch.where((temperature <= 0)[:, None], greedy, probs)


def _top_k(sorted_logits: torch.Tensor, top_k: torch.Tensor, vocab: int) -> torch.Tensor:
    """Mask (to -inf) every logit below the row's k-th largest; rows sorted descending."""
    k = torch.where((top_k <= 0) | (top_k >= vocab), vocab, top_k)
    kth = sorted_logits.gather(-1, (k - 1)[:, None])
    return sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))


def _top_p(sorted_probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """BoolTensor[R, V]: the nucleus of rows sorted descending (probabilities already top-k'd)."""
    # Token i is in the nucleus iff the mass strictly before it is < top_p, i.e. the prefix that ends
    # with it is the first to reach top_p. That set is a prefix (the exclusive cumsum only grows) and
    # always holds token 0. Ties of its last token are added by thresholding on that token's value.
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    in_prefix = before < top_p[:, None]
    in_prefix[:, 0] = True
    last = in_prefix.sum(dim=-1, keepdim=True) - 1
    threshold = sorted_probs.gather(-1, last)
    # top_p >= 1 is "off": the float cumsum may round past 1 and would otherwise drop tiny tails.
    return (sorted_probs >= threshold) | (top_p >= 1)[:, None]


def _min_p(sorted_probs: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """BoolTensor[R, V]: tokens at least min_p times as probable as the row's most probable one.

    Computed on the top-k distribution, before top-p: the most probable token survives top-p and a
    ratio to it is unchanged by renormalisation, so the set equals min-p applied after top-p.
    """
    return sorted_probs >= min_p[:, None] * sorted_probs[:, :1]

"""Log-probabilities of emitted tokens under the target's own distribution (OpenAI's `logprobs`).

They are the model's raw log-softmax, before temperature, top-k/p or min-p, as vLLM reports by default:
the same figures whether a request samples or decodes greedily, and whatever the drafter proposed
(a token's row is the target's output after the same prefix either way).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenLogprobs:
    """Rows of one request's emitted tokens: the chosen token's log-probability and its rank in the
    vocabulary (1: the most likely; vLLM's), and the `k` most likely tokens with theirs (most likely
    first)."""

    chosen: list[float]
    top_ids: list[list[int]]
    top_logprobs: list[list[float]]
    ranks: list[int]

    @classmethod
    def join(cls, parts: list[TokenLogprobs]) -> TokenLogprobs:
        return cls(
            [x for p in parts for x in p.chosen],
            [x for p in parts for x in p.top_ids],
            [x for p in parts for x in p.top_logprobs],
            [x for p in parts for x in p.ranks],
        )


def token_logprobs(logits: torch.Tensor, chosen: torch.Tensor, k: int) -> TokenLogprobs:
    """logits: [n, vocab], the target's rows the tokens were emitted from; chosen: LongTensor[n]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(1, chosen.to(logp.device).view(-1, 1)).squeeze(1)
    ranks = (logp > picked[:, None]).sum(dim=-1) + 1
    if k > 0:
        top = logp.topk(min(k, logp.shape[-1]), dim=-1)
        top_ids, top_lp = top.indices.tolist(), top.values.tolist()
    else:
        top_ids, top_lp = [[] for _ in range(len(chosen))], [[] for _ in range(len(chosen))]
    return TokenLogprobs(picked.tolist(), top_ids, top_lp, ranks.tolist())

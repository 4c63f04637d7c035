"""Step 4: per request, walk its tree against the target's distributions (kernels/acceptance.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from treespec.kernels.acceptance import Acceptance, accept_greedy, accept_sampling
from treespec.kernels.logits_processing import probs_from_logits
from treespec.verifier.forward_stage import ForwardItem, ForwardResult


@dataclass(frozen=True)
class Verdict:
    item: ForwardItem
    acceptance: Acceptance


def verify(result: ForwardResult) -> list[Verdict]:
    """One verdict per item that has a tree (decodes, and prefills that finish the prompt)."""
    items = [i for i in result.items if i.tree is not None]
    if not items:
        return []
    greedy_rows = result.logits.argmax(dim=-1).cpu()
    sampled = [i for i in items if not i.state.request.sampling.greedy]
    probs = _sampling_probs(result.logits, sampled)
    verdicts = []
    for item in items:
        tree = item.tree
        assert tree is not None
        rows = slice(item.logits_start, item.logits_start + tree.num_nodes)
        if item.state.request.sampling.greedy:
            acceptance = accept_greedy(tree.tokens, tree.parents, greedy_rows[rows])
        else:
            acceptance = accept_sampling(
                tree.tokens, tree.parents, tree.probs, probs[rows], item.state.generator
            )
        verdicts.append(Verdict(item, acceptance))
    return verdicts


def _sampling_probs(logits: torch.Tensor, items: list[ForwardItem]) -> torch.Tensor:
    """The target's sampling distributions for every row of the sampling requests, batched.

    Returned on the CPU, indexed like `logits` (rows of greedy requests are left as zeros)."""
    if not items:
        return logits.new_zeros(0)
    index = torch.cat([torch.arange(i.logits_start, i.logits_start + _n(i)) for i in items])
    params = [(i.state.request.sampling, _n(i)) for i in items]

    def per_row(values: list[float | int], dtype: torch.dtype) -> torch.Tensor:
        return torch.cat([torch.full((n,), v, dtype=dtype) for v, (_, n) in zip(values, params, strict=True)])

    device = logits.device
    probs = probs_from_logits(
        logits[index.to(device)],
        per_row([s.temperature for s, _ in params], torch.float32).to(device),
        per_row([s.top_k for s, _ in params], torch.long).to(device),
        per_row([s.top_p for s, _ in params], torch.float32).to(device),
        per_row([s.min_p for s, _ in params], torch.float32).to(device),
    ).cpu()
    out = torch.zeros(logits.shape[0], logits.shape[1], dtype=torch.float32)
    out[index] = probs
    return out


def _n(item: ForwardItem) -> int:
    assert item.tree is not None
    return item.tree.num_nodes

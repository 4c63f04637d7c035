"""Step 4: per request, walk its tree against the target's distributions (kernels/acceptance.py)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import torch

from treespec.kernels.acceptance import Acceptance, accept_greedy, accept_sampling
from treespec.kernels.allowed_tokens import mask_disallowed
from treespec.kernels.coupled_sampling import accept_coupled
from treespec.kernels.logit_bias import apply_logit_bias
from treespec.kernels.logits_processing import probs_from_logits
from treespec.kernels.min_tokens import forbid_early_stops
from treespec.kernels.penalties import penalize_tree_rows
from treespec.kernels.token_bans import ban_bad_words, keep_allowed
from treespec.shared.drafting.token_tree import TokenTree
from treespec.verifier.forward_stage import ForwardItem, ForwardResult


@dataclass(frozen=True)
class Verdict:
    item: ForwardItem
    acceptance: Acceptance


def verify(result: ForwardResult, eos_token_ids: Collection[int] = ()) -> list[Verdict]:
    """One verdict per item that has a tree (decodes, and prefills that finish the prompt);
    `eos_token_ids`: the model's, which `min_tokens` holds back like the request's stop tokens."""
    items = [i for i in result.items if i.tree is not None]
    greedy = [i for i in items if i.state.request.sampling.greedy]
    sampled = [i for i in items if not i.state.request.sampling.greedy]
    verdicts = []
    if greedy:
        argmax = result.logits.argmax(dim=-1).cpu()
        for item in greedy:
            tree = _tree(item)
            if item.state.request.sampling.adjusts_logits:
                rows = _item_logits(result.logits, item, eos_token_ids).argmax(dim=-1).cpu()
            else:
                rows = argmax[item.logits_start : item.logits_start + tree.num_nodes]
            verdicts.append(Verdict(item, accept_greedy(tree.tokens, tree.parents, rows)))
    if sampled:
        probs = _sampling_probs(result.logits, sampled, eos_token_ids)
        start = 0
        for item in sampled:
            tree = _tree(item)
            rows = probs[start : start + tree.num_nodes]
            start += tree.num_nodes
            verdicts.append(Verdict(item, _accept_sampled(item, tree, rows)))
    return verdicts


def _accept_sampled(item: ForwardItem, tree: TokenTree, rows: torch.Tensor) -> Acceptance:
    """A seeded request samples by position (coupled_sampling.py: the same output whatever the
    drafter proposes); others by recursive rejection sampling, which uses draft probabilities."""
    seed = item.state.request.sampling.seed
    if seed is not None:
        return accept_coupled(tree.tokens, tree.parents, rows, seed, len(item.state.tokens))
    return accept_sampling(tree.tokens, tree.parents, tree.probs, rows, item.state.generator)


def _sampling_probs(
    logits: torch.Tensor, items: list[ForwardItem], eos_token_ids: Collection[int]
) -> torch.Tensor:
    """The target's sampling distributions for the rows of `items`, batched, in item order: CPU
    [sum of tree sizes, vocab]."""
    params = [(i.state.request.sampling, _tree(i).num_nodes) for i in items]

    def per_row(values: list[float | int], dtype: torch.dtype) -> torch.Tensor:
        return torch.cat([torch.full((n,), v, dtype=dtype) for v, (_, n) in zip(values, params, strict=True)])

    device = logits.device
    return probs_from_logits(
        torch.cat([_item_logits(logits, i, eos_token_ids) for i in items]),
        per_row([s.temperature for s, _ in params], torch.float32).to(device),
        per_row([s.top_k for s, _ in params], torch.long).to(device),
        per_row([s.top_p for s, _ in params], torch.float32).to(device),
        per_row([s.min_p for s, _ in params], torch.float32).to(device),
    ).cpu()


def _item_logits(logits: torch.Tensor, item: ForwardItem, eos_token_ids: Collection[int]) -> torch.Tensor:
    """The item's tree rows, with its request's allowed tokens, bad words, logit bias and min_tokens,
    then its penalties, each for the row's own path (as vLLM orders them), then its grammar's mask."""
    tree = _tree(item)
    raw = logits[item.logits_start : item.logits_start + tree.num_nodes]
    rows = _adjusted(raw, item, eos_token_ids)
    grammar = item.state.grammar
    if grammar is None:
        return rows
    allowed = grammar.allowed(tree.tokens.tolist(), tree.parents.tolist())
    return mask_disallowed(rows, allowed, raw)


def _adjusted(rows: torch.Tensor, item: ForwardItem, eos_token_ids: Collection[int]) -> torch.Tensor:
    tree = _tree(item)
    sampling = item.state.request.sampling
    state = item.state
    if sampling.allowed_token_ids:
        rows = keep_allowed(rows, sampling.allowed_token_ids)
    if sampling.bad_words:
        rows = ban_bad_words(
            rows, sampling.bad_words, state.tokens, state.num_prompt, tree.tokens, tree.parents
        )
    if sampling.logit_bias:
        rows = apply_logit_bias(rows, sampling.logit_bias)
    if sampling.min_tokens:
        stops = sorted(sampling.stop_ids(eos_token_ids))
        rows = forbid_early_stops(rows, tree.parents, item.state.num_output, sampling.min_tokens, stops)
    if not sampling.penalties.active:
        return rows
    prompt, output = state.tokens[: state.num_prompt], state.tokens[state.num_prompt :]
    return penalize_tree_rows(rows, sampling.penalties, prompt, output, tree.tokens, tree.parents)


def _tree(item: ForwardItem) -> TokenTree:
    assert item.tree is not None
    return item.tree

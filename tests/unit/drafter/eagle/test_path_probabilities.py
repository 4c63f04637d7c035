"""Every node of an EAGLE tree carries its path's draft probability: the batched levels, written into
the draft cache's scratch rows and attending through a mask, give what drafting each path alone does."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.unit.drafter.eagle.engine_runs import grown_request, make_drafter
from treespec.drafter.eagle.drafter import EagleDrafter
from treespec.drafter.eagle.head import attend
from treespec.kernels.tree_mask import tree_depths
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.model.causal_lm import CausalLM

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _path(tree: TokenTree, node: int) -> list[int]:
    """The nodes from the root's child down to `node`."""
    path = []
    while node > 0:
        path.append(node)
        node = int(tree.parents[node])
    return path[::-1]


@torch.inference_mode()
def _path_logprobs(drafter: EagleDrafter, rid: str, tokens: list[int]) -> list[float]:
    """The head's log-probability of each of `tokens` drafted one after the other from the root, each
    one head row attending to the draft cache and to the rows before it, with plain attention."""
    head, state = drafter.head, drafter._requests[rid]
    vocab = drafter._vocab_ids
    assert state.last_hidden is not None and state.last_logprobs is not None
    keys, values = [state.kv.k[: state.kv.length]], [state.kv.v[: state.kv.length]]
    logprobs, hidden = state.last_logprobs, state.last_hidden
    out = []
    for depth, token in enumerate(tokens, start=1):
        out.append(float(logprobs[token if vocab is None else int((vocab == token).nonzero())]))
        li = head.layer_input(drafter.target.embed[torch.tensor([token])], hidden[None])
        qkv = head.qkv(li.attn_in, torch.tensor([state.next_position - 1 + depth]))
        keys.append(qkv.k)
        values.append(qkv.v)
        result = head.finish(li.residual, attend(qkv.q, torch.cat(keys), torch.cat(values), None))
        hidden = result.hidden[0]
        logprobs = drafter._logprobs(result.for_logits)[0]
    return out


@pytest.mark.parametrize("name", ["eagle", "eagle3"])
def test_every_node_carries_the_probability_of_its_path_drafted_token_by_token(
    name: str, heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    """The tree's levels run batched, every node's row written into the draft cache's scratch rows
    and attending through a mask; drafting each path alone, row by row, must give the same numbers."""
    drafter = make_drafter(name, heads[name], tiny_model, tiny_path, draft_probs=False)
    grown_request(drafter, tiny_path, tiny_model, "p3")
    budget = TreeBudget(14, 4, 3)
    (tree,) = drafter.propose([DraftQuery("r", budget)])
    assert tree is not None and tree.path_probs is not None
    assert int(tree_depths(tree.parents).max()) >= 3  # deep enough to read scratch rows of two levels
    for node in range(1, tree.num_nodes):
        path = _path(tree, node)
        expected = math.exp(sum(_path_logprobs(drafter, "r", [int(tree.tokens[i]) for i in path])))
        assert float(tree.path_probs[node]) == pytest.approx(expected, rel=1e-4)

"""The target's embedding and lm_head moved into shared memory, for a co-located drafter process.

The verifier swaps its own weights for the shared copies, so memory holds one copy of each, and a
tied model shares its single matrix once (the head is the embedding's transpose). One exception: a
head packed for oneDNN or into panels (CPU float32, see shared/model/linear.py) stays packed for the
verifier's speed, and drafters get a dense copy of it, unless it is the embedding (tied), which is
shared anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from treespec.kernels.panel_gemm import PanelWeight
from treespec.shared.drafting.colocation_wire import SharedView
from treespec.shared.drafting.shared_tensor import SharedTensor
from treespec.shared.model.causal_lm import CausalLM


@dataclass(frozen=True)
class SharedTarget:
    embed: SharedView  # [vocab, hidden]
    lm_head: SharedView  # [hidden, vocab] dense
    segments: tuple[SharedTensor, ...]  # owned: unlinked by `unlink`

    def unlink(self) -> None:
        for segment in self.segments:
            segment.unlink()


def share_target(model: CausalLM) -> SharedTarget:
    """Export `model`'s embedding and head; its weights then point at the shared copies. Swapping an
    attribute is atomic, and the values are the same, so a forward running meanwhile is unaffected."""
    made: list[SharedTensor] = []

    def share(tensor: torch.Tensor) -> SharedTensor:
        made.append(SharedTensor.copy_of(tensor))
        return made[-1]

    try:
        embed, lm_head = _share_weights(model, share)
    except BaseException:
        for segment in made:
            segment.unlink()
        raise
    return SharedTarget(embed, lm_head, tuple(made))


def _share_weights(
    model: CausalLM, share: Callable[[torch.Tensor], SharedTensor]
) -> tuple[SharedView, SharedView]:
    w = model.weights
    if w.embed is None:  # tied, dense: the embedding is the head's columns
        assert isinstance(w.lm_head, torch.Tensor)  # repacking gives a tied embedding its own copy
        head = share(w.lm_head)
        w.lm_head = head.tensor
        return SharedView(head.handle, transposed=True), SharedView(head.handle)
    embed = share(w.embed)
    w.embed = embed.tensor
    if isinstance(w.lm_head, torch.Tensor) and not w.lm_head.is_mkldnn:
        head = share(w.lm_head)
        w.lm_head = head.tensor
        return SharedView(embed.handle), SharedView(head.handle)
    # [vocab, hidden]: packing only reorders, so this is exact
    dense = w.lm_head.to_dense().t() if isinstance(w.lm_head, PanelWeight) else w.lm_head.to_dense()
    if torch.equal(dense, embed.tensor):  # tied (packing gave the embedding a dense copy of its own)
        return SharedView(embed.handle), SharedView(embed.handle, transposed=True)
    return SharedView(embed.handle), SharedView(share(dense).handle, transposed=True)

"""The target's embedding and lm_head shared with a co-located drafter process.

On CPU they move into POSIX shared memory: the verifier swaps its own weights for the shared copies,
so memory holds one copy of each. On CUDA they are exported in place through CUDA IPC (cuda_ipc.py):
nothing is copied, and the verifier's weights stay what they were. Either way a tied model shares its
single matrix once (the head is the embedding's transpose). One exception, on CPU only: a head packed
for oneDNN or into panels (CPU float32, see shared/model/linear.py) stays packed for the verifier's
speed, and drafters get a dense copy of it, unless it is the embedding (tied), which is shared anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from treespec.kernels.panel_gemm import PanelWeight
from treespec.shared.drafting.colocation_wire import SharedView
from treespec.shared.drafting.cuda_ipc import CudaSharedTensor
from treespec.shared.drafting.shared_tensor import SharedTensor
from treespec.shared.model.causal_lm import CausalLM

# The owner's side of a shared tensor: a shared memory segment, or a CUDA tensor exported in place.
Segment = SharedTensor | CudaSharedTensor


def share_tensor(tensor: torch.Tensor) -> Segment:
    """A CPU tensor's copy in shared memory (use `.tensor` from then on), or a CUDA tensor itself.
    Raises SharedTensorError for a tensor that can be neither (another device, a packed layout)."""
    if tensor.device.type == "cuda":
        return CudaSharedTensor(tensor)
    return SharedTensor.copy_of(tensor)


@dataclass(frozen=True)
class ExportedView:
    """A shared segment, or its transpose, as the owner keeps it: exported anew for each reply, since a
    CUDA handle counts one receiver (a shared memory handle is the same each time)."""

    segment: Segment
    transposed: bool = False

    def export(self) -> SharedView:
        return SharedView(self.segment.export(), self.transposed)


@dataclass(frozen=True)
class SharedTarget:
    embed: ExportedView  # [vocab, hidden]
    lm_head: ExportedView  # [hidden, vocab] dense
    segments: tuple[Segment, ...]  # owned: unlinked by `unlink`

    def views(self) -> tuple[SharedView, SharedView]:
        """The embedding's and the head's handles for one receiver."""
        return self.embed.export(), self.lm_head.export()

    def unlink(self) -> None:
        for segment in self.segments:
            segment.unlink()


def share_target(model: CausalLM) -> SharedTarget:
    """Export `model`'s embedding and head; on CPU its weights then point at the shared copies. Swapping
    an attribute is atomic, and the values are the same, so a forward running meanwhile is unaffected."""
    made: list[Segment] = []

    def share(tensor: torch.Tensor) -> Segment:
        made.append(share_tensor(tensor))
        return made[-1]

    try:
        embed, lm_head = _share_weights(model, share)
    except BaseException:
        for segment in made:
            segment.unlink()
        raise
    return SharedTarget(embed, lm_head, tuple(made))


def _share_weights(
    model: CausalLM, share: Callable[[torch.Tensor], Segment]
) -> tuple[ExportedView, ExportedView]:
    w = model.weights
    if w.embed is None:  # tied, dense: the embedding is the head's columns
        assert isinstance(w.lm_head, torch.Tensor)  # repacking gives a tied embedding its own copy
        head = share(w.lm_head)
        w.lm_head = head.tensor
        return ExportedView(head, transposed=True), ExportedView(head)
    embed = share(w.embed)
    w.embed = embed.tensor
    if isinstance(w.lm_head, torch.Tensor) and not w.lm_head.is_mkldnn:
        head = share(w.lm_head)
        w.lm_head = head.tensor
        return ExportedView(embed), ExportedView(head)
    # [vocab, hidden]: packing only reorders, so this is exact
    dense = w.lm_head.to_dense().t() if isinstance(w.lm_head, PanelWeight) else w.lm_head.to_dense()
    if torch.equal(dense, embed.tensor):  # tied (packing gave the embedding a dense copy of its own)
        return ExportedView(embed), ExportedView(embed, transposed=True)
    return ExportedView(embed), ExportedView(share(dense), transposed=True)

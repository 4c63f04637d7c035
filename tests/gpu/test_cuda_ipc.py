"""Co-location on a GPU: a drafter process maps the verifier's CUDA memory through CUDA IPC, with no
copy on either side (the CPU path and the handles' JSON: tests/unit/drafter/test_colocation.py,
test_shared_tensor.py, test_cuda_handles.py).

A process cannot open its own CUDA IPC handles, so every attacher here is a child started with the
`spawn` context (CUDA cannot be used after `fork` either); what the children run lives at module
level, since spawn pickles it by its qualified name. Each child reports what it saw through a queue,
as plain lists, and the parent compares.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.unit.drafter.eagle.public_checkpoints import write_eagle3
from tests.unit.model.test_forward_vs_hf import make_checkpoint
from treespec.drafter.eagle.drafter import EagleDrafter
from treespec.shared.drafting.colocated_access import ColocatedTargetAccess
from treespec.shared.drafting.colocation import ColocationServer
from treespec.shared.drafting.cuda_ipc import CudaSharedTensor, CudaTensorHandle, attach_cuda_tensor
from treespec.shared.drafting.drafter import DrafterContext, DraftQuery
from treespec.shared.drafting.features import FeatureRing, FeatureSlots, FeatureSpec
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.drafting.token_tree import TreeBudget
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import LoadOptions, load_model
from treespec.verifier.feature_publisher import finish_writes

pytestmark = pytest.mark.gpu

VOCAB, HIDDEN, LAYERS = 97, 64, 3  # the tiny model's (tests/conftest.py's tiny_path)
WAIT_S = 120.0  # a child's start: a fresh interpreter importing torch and initialising CUDA
PROMPT = [5, 6, 7, 8, 9]
BUDGET = TreeBudget(num_draft_tokens=8, num_steps=4, topk=3)


def _spawn() -> Any:
    return multiprocessing.get_context("spawn")


@contextmanager
def _child(target: Callable[..., None], *args: Any) -> Iterator[None]:
    """`target(*args)` in a spawned process: it must exit cleanly once the block is done; on a failure
    in the block it is killed (it may be waiting for the parent), and the failure is what is raised."""
    process = _spawn().Process(target=target, args=args)
    process.start()
    try:
        yield
    except BaseException:
        process.kill()
        process.join(WAIT_S)
        raise
    process.join(WAIT_S)
    assert process.exitcode == 0, f"the child process failed (exit code {process.exitcode})"


def _cuda_model(tiny_path: Path) -> CausalLM:
    """Its own copy, float32 on the GPU: the comparisons below are exact."""
    return load_model(tiny_path, LoadOptions(device="cuda", dtype="float32"))


# ---- a tensor ------------------------------------------------------------------------------------


def _attach_and_write(handle: dict[str, Any], ready: Any, go: Any, results: Any) -> None:
    """In a spawned process: attach, report (once told to) what is there, then add 1 to row 0."""
    tensor = attach_cuda_tensor(CudaTensorHandle.from_json(handle))
    results.put((str(tensor.device), tuple(tensor.shape), tensor.stride()))
    ready.set()
    go.wait(WAIT_S)
    results.put(tensor.cpu().tolist())
    tensor[0] += 1.0
    torch.cuda.synchronize()  # the write is done before the parent hears of it
    results.put("written")


def test_a_child_process_maps_a_cuda_tensor_and_each_sees_the_others_writes() -> None:
    base = torch.arange(40, dtype=torch.float32, device="cuda").view(5, 8)
    view = base[1:4, 2:6]  # not contiguous, at an offset into its storage: both travel in the handle
    owner = CudaSharedTensor(view)
    assert owner.tensor is view  # exported in place, not copied
    handle = owner.export()
    assert handle.storage_offset == 10 and handle.stride == (8, 1) and handle.device == 0
    context = _spawn()
    ready, go, results = context.Event(), context.Event(), context.Queue()
    with _child(_attach_and_write, handle.to_json(), ready, go, results):
        assert ready.wait(WAIT_S), "the child did not attach"
        assert results.get(timeout=WAIT_S) == ("cuda:0", (3, 4), (8, 1))
        view[2] = 7.0  # after the child attached
        before = view.cpu()  # synchronizes: the write is done before the child is told to read
        go.set()
        seen = torch.tensor(results.get(timeout=WAIT_S))
        assert torch.equal(seen, before) and torch.equal(seen[2], torch.full((4,), 7.0))
        assert results.get(timeout=WAIT_S) == "written"
    row = torch.arange(2, 6, dtype=torch.float32) + 8  # base row 1, columns 2..5
    assert torch.equal(base[1, 2:6].cpu(), row + 1)  # the child's write, in the parent's memory
    assert torch.equal(base[0].cpu(), torch.arange(8, dtype=torch.float32))  # nothing else moved


# ---- the co-location server ----------------------------------------------------------------------


def _read_target(
    path: str, spec: FeatureSpec, rows: list[int], ready: Any, go: Any, slots: Any, results: Any
) -> None:
    """In a spawned drafter-like process: attach to the target and the ring, report the embedding's
    `rows` and the head's columns for them, read the ring's slots it is told of, write one value."""
    access = ColocatedTargetAccess(path)
    tensors = access.tensors()
    ring = access.feature_ring(spec, 8)
    assert isinstance(tensors.lm_head, torch.Tensor)
    results.put(
        {
            "devices": [str(t.device) for t in (tensors.embed, tensors.lm_head, ring.buffer)],
            "embed": tensors.embed[rows].tolist(),
            "lm_head": tensors.lm_head[:, rows].tolist(),
            "ring": float(ring.buffer.abs().sum()),
        }
    )
    ready.set()
    go.wait(WAIT_S)
    results.put(ring.read(slots.get(timeout=WAIT_S)).tolist())
    tensors.embed[5, 0] = 123.0
    torch.cuda.synchronize()
    results.put("written")


def test_a_drafter_process_maps_the_cuda_targets_tensors_and_ring(tiny_path: Path, tmp_path: Path) -> None:
    model = _cuda_model(tiny_path)
    target = LocalTargetAccess(model).tensors()  # the verifier's own tensors
    head = target.lm_head
    assert isinstance(head, torch.Tensor)  # dense on a GPU
    pointers = (target.embed.data_ptr(), head.data_ptr())
    spec = FeatureSpec(HIDDEN, (0, 1))
    rows = [0, 5, VOCAB - 1]
    with ColocationServer(tmp_path / "colocation.sock", model) as server:
        after = LocalTargetAccess(model).tensors()
        assert after.embed is target.embed and after.lm_head is head  # shared in place, not swapped
        assert (after.embed.data_ptr(), head.data_ptr()) == pointers
        context = _spawn()
        ready, go, slots, results = context.Event(), context.Event(), context.Queue(), context.Queue()
        with _child(_read_target, str(server.path), spec, rows, ready, go, slots, results):
            assert ready.wait(WAIT_S), "the drafter process did not attach"
            seen = results.get(timeout=WAIT_S)
            assert seen["devices"] == ["cuda:0"] * 3
            assert torch.equal(torch.tensor(seen["embed"]), target.embed[rows].cpu())
            assert torch.equal(torch.tensor(seen["lm_head"]), head[:, rows].cpu())
            assert seen["ring"] == 0.0
            ring = server.feature_ring
            assert ring is not None and ring.spec == spec and ring.capacity == 8
            assert ring.buffer.device == model.device
            published = torch.randn(11, spec.width, device="cuda")  # wraps around: the last 8 stay
            ring.write(published[:6])
            written = ring.write(published[6:])
            finish_writes(ring)  # what FeaturePublisher.publish does before the slots go out
            go.set()
            slots.put(list(written))
            assert torch.equal(torch.tensor(results.get(timeout=WAIT_S)), published[6:].cpu())
            assert results.get(timeout=WAIT_S) == "written"
            assert float(target.embed[5, 0]) == 123.0  # the drafter's write, in the verifier's embedding


def _tied_views(path: str, rows: list[int], results: Any) -> None:
    """In a spawned drafter-like process: a tied target's embedding and head, as views of one mapping."""
    tensors = ColocatedTargetAccess(path).tensors()
    head = tensors.lm_head
    assert isinstance(head, torch.Tensor)
    one_mapping = tensors.embed.data_ptr() == head.data_ptr() and torch.equal(head, tensors.embed.t())
    results.put((one_mapping, tensors.embed[rows].tolist()))


def test_a_tied_cuda_target_shares_its_one_matrix(tmp_path: Path) -> None:
    """The embedding and the head are exported apart (two handles of one storage, each with its own
    reference count): the drafter maps the storage once and sees both views of it."""
    make_checkpoint(tmp_path / "tied", "llama-tied-bias")
    model = load_model(tmp_path / "tied", LoadOptions(device="cuda", dtype="float32"))
    embed = LocalTargetAccess(model).tensors().embed
    rows = [1, 50, VOCAB - 1]
    with ColocationServer(tmp_path / "colocation.sock", model) as server:
        context = _spawn()
        results = context.Queue()
        with _child(_tied_views, str(server.path), rows, results):
            one_mapping, seen = results.get(timeout=WAIT_S)
    assert one_mapping and torch.equal(torch.tensor(seen), embed[rows].cpu())


# ---- the EAGLE drafter on the co-located tensors ---------------------------------------------------


def _draft_colocated(path: str, options: dict[str, Any], slots: Any, results: Any) -> None:
    """In a spawned drafter process: the EAGLE-3 drafter over the co-located target, as `treespec
    drafter --colocate` builds it; report where it runs, then one tree over the slots it is told of."""
    drafter = create_drafter("eagle3", DrafterContext(VOCAB, None, options, ColocatedTargetAccess(path)))
    assert isinstance(drafter, EagleDrafter)
    devices = {str(p.device) for p in drafter.head.parameters()} | {str(drafter.ring.buffer.device)}
    results.put(sorted(devices))
    tree = _one_tree(drafter, tuple(slots.get(timeout=WAIT_S)))
    results.put((tree[0], tree[1]))


def _one_tree(drafter: EagleDrafter, slots: tuple[int, ...]) -> tuple[list[int], list[int]]:
    drafter.open("r", PROMPT)
    drafter.commit("r", [10], FeatureSlots(0, slots))  # the prompt's features, and the first token
    (tree,) = drafter.propose([DraftQuery("r", BUDGET)])
    assert tree is not None
    return tree.tokens.tolist(), tree.parents.tolist()


def _publish(ring: FeatureRing, rows: torch.Tensor) -> tuple[int, ...]:
    slots = ring.write(rows)
    finish_writes(ring)
    return slots


def test_a_colocated_eagle_drafter_drafts_on_the_targets_gpu_as_in_process(
    tiny_path: Path, tmp_path: Path
) -> None:
    model = _cuda_model(tiny_path)
    head = write_eagle3(tmp_path / "head", HIDDEN, VOCAB, LAYERS, seed=4)
    options = {"draft_path": str(head), "level_cost": 0.0}  # every level: a deep tree to compare
    local = create_drafter("eagle3", DrafterContext(VOCAB, None, options, LocalTargetAccess(model)))
    assert isinstance(local, EagleDrafter) and {p.device for p in local.head.parameters()} == {model.device}
    features = torch.randn(len(PROMPT), local.ring.spec.width, device="cuda")
    want = _one_tree(local, _publish(local.ring, features))

    with ColocationServer(tmp_path / "colocation.sock", model) as server:
        context = _spawn()
        slots, results = context.Queue(), context.Queue()
        with _child(_draft_colocated, str(server.path), options, slots, results):
            assert results.get(timeout=WAIT_S) == ["cuda:0"]  # the head, its caches and the ring
            ring = server.feature_ring
            assert ring is not None and ring.spec == local.ring.spec
            slots.put(list(_publish(ring, features)))
            got = results.get(timeout=WAIT_S)
    assert (list(got[0]), list(got[1])) == want and len(want[0]) == BUDGET.num_draft_tokens

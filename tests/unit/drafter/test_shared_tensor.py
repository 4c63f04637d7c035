"""Tensors in POSIX shared memory: one copy seen by two processes, cleaned up by the owner only."""

from __future__ import annotations

import multiprocessing
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch

from treespec.shared.drafting.shared_target import share_tensor
from treespec.shared.drafting.shared_tensor import (
    SHM_DIR,
    SharedTensor,
    SharedTensorError,
    TensorHandle,
    attach_tensor,
)
from treespec.shared.model.linear import pack_weight


def _attach_and_report(handle: dict[str, Any], ready: Any, go: Any, results: Any) -> None:
    """In a spawned process: attach, then (once told) report what is there and write a row."""
    tensor = attach_tensor(TensorHandle.from_json(handle))
    ready.set()
    go.wait(60)
    results.put(tensor.tolist())
    tensor[0] += 1.0


def test_a_second_process_sees_writes_made_after_it_attached() -> None:
    owner = SharedTensor.copy_of(torch.arange(12, dtype=torch.float32).view(3, 4))
    try:
        context = multiprocessing.get_context("spawn")
        ready, go, results = context.Event(), context.Event(), context.Queue()
        child = context.Process(target=_attach_and_report, args=(owner.handle.to_json(), ready, go, results))
        child.start()
        assert ready.wait(120)
        owner.tensor[2] = 7.0  # after the child mapped the segment
        go.set()
        seen = torch.tensor(results.get(timeout=60))
        child.join(60)
        assert child.exitcode == 0
        assert torch.equal(seen[2], torch.full((4,), 7.0)) and torch.equal(seen[1], owner.tensor[1])
        assert torch.equal(owner.tensor[0], torch.arange(4, dtype=torch.float32) + 1)  # the child's write
        # The child exited without unlinking (nor did a resource tracker do it for it).
        assert (SHM_DIR / owner.handle.name).exists()
    finally:
        owner.unlink()
    assert not (SHM_DIR / owner.handle.name).exists()
    assert float(owner.tensor[2, 0]) == 7.0  # the owner's mapping outlives the name


def test_attaching_needs_the_segment_and_never_creates_one() -> None:
    owner = SharedTensor((4,), torch.float32)
    handle = owner.handle
    assert torch.equal(attach_tensor(handle), torch.zeros(4))
    owner.unlink()
    owner.unlink()  # idempotent
    with pytest.raises(SharedTensorError, match="does not exist"):
        attach_tensor(handle)
    assert not (SHM_DIR / handle.name).exists()


def test_handles_round_trip_and_reject_what_is_not_a_segment() -> None:
    handle = TensorHandle("treespec-1-ab", (3, 4), "bfloat16")
    assert handle.to_json() == {"kind": "shm", "name": "treespec-1-ab", "shape": [3, 4], "dtype": "bfloat16"}
    assert TensorHandle.from_json(handle.to_json()) == handle and handle.nbytes == 24
    legacy = {"name": "treespec-1-ab", "shape": [3, 4], "dtype": "bfloat16"}  # before handles had kinds
    assert TensorHandle.from_json(legacy) == handle
    for bad in (
        {"name": "../etc/passwd", "shape": [1], "dtype": "float32"},
        {"name": "x/y", "shape": [1], "dtype": "float32"},
        {"name": "..", "shape": [1], "dtype": "float32"},
        {"name": "ok", "shape": [0], "dtype": "float32"},
        {"name": "ok", "shape": [2], "dtype": "object"},
        {"name": "ok", "shape": "2", "dtype": "float32"},
        {"name": "ok", "shape": [True], "dtype": "float32"},
        {"name": None, "shape": [1], "dtype": "float32"},
        {"kind": "cuda", "name": "ok", "shape": [1], "dtype": "float32"},
    ):
        with pytest.raises(ValueError):
            TensorHandle.from_json(bad)


def test_what_shared_memory_cannot_hold_is_refused_with_a_reason() -> None:
    """A CUDA tensor is shared in place through CUDA IPC instead (tests/gpu/test_cuda_ipc.py); other
    devices and packed tensors cannot be shared at all."""
    fake_cuda = cast(torch.Tensor, SimpleNamespace(device=torch.device("cuda", 0)))
    with pytest.raises(SharedTensorError, match="in place through CUDA IPC"):
        SharedTensor.copy_of(fake_cuda)
    with pytest.raises(SharedTensorError, match="dense"):
        SharedTensor.copy_of(pack_weight(torch.randn(8, 8)))
    with pytest.raises(SharedTensorError, match="dense"):
        share_tensor(pack_weight(torch.randn(8, 8)))
    for share in (SharedTensor.copy_of, share_tensor):
        with pytest.raises(SharedTensorError, match="only CPU and CUDA tensors"):
            share(torch.empty(2, device="meta"))

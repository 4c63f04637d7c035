"""CUDA IPC handles as JSON, checked without a GPU: a handle comes off a socket, so anything malformed
must be a ValueError (the handshake's "malformed reply"), and nothing is ever unpickled. Sharing and
attaching for real: tests/gpu/test_cuda_ipc.py."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch

from treespec.shared.drafting.colocation_wire import HandshakeReply, SharedView, handle_from_json
from treespec.shared.drafting.cuda_ipc import (
    IPC_HANDLE_BYTES,
    CudaSharedTensor,
    CudaTensorHandle,
    attach_cuda_tensor,
)
from treespec.shared.drafting.shared_tensor import SharedTensorError, TensorHandle


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def handle_json(**changes: Any) -> dict[str, Any]:
    """A well-formed handle of a [4, 3] float32 tensor, written by hand as the wire carries it."""
    data: dict[str, Any] = {
        "kind": "cuda",
        "shape": [4, 3],
        "stride": [3, 1],
        "storage_offset": 2,
        "dtype": "float32",
        "device": 0,
        "device_uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555",
        "storage_handle": b64(bytes(range(66))),  # torch's header, then the cudaIpcMemHandle_t
        "storage_size_bytes": 4 * 14,  # the view's 2 + 12 elements
        "storage_offset_bytes": 512,
        "ref_counter_handle": b64(b"/torch_123_456_0"),
        "ref_counter_offset": 7,
        "event_handle": b64(bytes(IPC_HANDLE_BYTES)),
        "event_sync_required": True,
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not ...}  # `...`: leave the field out


def test_a_cuda_handle_round_trips_through_json() -> None:
    data = handle_json()
    handle = CudaTensorHandle.from_json(json.loads(json.dumps(data)))
    assert handle.to_json() == data
    assert (handle.shape, handle.stride, handle.storage_offset) == ((4, 3), (3, 1), 2)
    assert handle.torch_dtype == torch.float32 and handle.extent_bytes == 56
    assert handle.storage_handle == bytes(range(66)) and handle.ref_counter_handle == b"/torch_123_456_0"
    assert handle_from_json(data) == handle  # the wire tells the kinds apart
    no_uuid = CudaTensorHandle.from_json(handle_json(device_uuid=...))
    assert no_uuid.device_uuid == ""  # the attacher goes by the index then


def test_the_wire_carries_either_kind_and_old_shared_memory_handles() -> None:
    cpu = TensorHandle("treespec-1-ab", (97, 64), "float32")
    assert cpu.to_json()["kind"] == "shm"
    legacy = {"name": "treespec-1-ab", "shape": [97, 64], "dtype": "float32"}  # sent before kinds
    assert handle_from_json(legacy) == cpu == TensorHandle.from_json(legacy)
    cuda = CudaTensorHandle.from_json(handle_json(shape=[2, 3], stride=[1, 2], storage_offset=0))
    reply = HandshakeReply(3, 64, 97, SharedView(cuda), SharedView(cuda, transposed=True), 1000, cuda)
    assert HandshakeReply.from_json(json.loads(json.dumps(reply.to_json()))) == reply
    bad_ones: list[Any] = [{**legacy, "kind": "nccl"}, {**handle_json(), "kind": "shm"}, None, [], "cuda"]
    for bad in bad_ones:
        with pytest.raises(ValueError):
            handle_from_json(bad)


@pytest.mark.parametrize(
    "changes",
    [
        {"storage_handle": "not base64!"},
        {"storage_handle": b64(b"short")},  # shorter than a cudaIpcMemHandle_t
        {"storage_handle": b64(bytes(2000))},
        {"storage_handle": 12},
        {"storage_handle": ...},
        {"event_handle": b64(bytes(63))},
        {"event_handle": "AAAA="},  # bad padding
        {"ref_counter_handle": b64(b"/torch\0x")},
        {"ref_counter_handle": ""},
        {"shape": [4, -3]},
        {"shape": [4, 0]},
        {"shape": []},
        {"shape": "4,3"},
        {"shape": [4, 3.0]},
        {"shape": [4, True]},
        {"stride": [3]},
        {"stride": [3, -1]},
        {"stride": None},
        {"storage_offset": -1},
        {"storage_offset": "2"},
        {"storage_size_bytes": 0},
        {"storage_size_bytes": 55},  # one byte short of the view
        {"storage_size_bytes": 2**70},
        {"storage_offset_bytes": -512},
        {"ref_counter_offset": None},
        {"device": -1},
        {"device": 128},
        {"device": "0"},
        {"device": False},
        {"device_uuid": 5},
        {"dtype": "object"},
        {"dtype": ...},
        {"event_sync_required": "yes"},
        {"event_sync_required": 1},
        {"kind": ...},
    ],
)
def test_a_malformed_cuda_handle_is_a_value_error(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CudaTensorHandle.from_json(handle_json(**changes))


def test_a_reply_with_a_malformed_handle_is_refused_as_malformed() -> None:
    good = CudaTensorHandle.from_json(handle_json(shape=[2, 3], stride=[1, 2], storage_offset=0))
    reply = HandshakeReply(3, 64, 97, SharedView(good), SharedView(good), 1000).to_json()
    reply["embed"]["tensor"]["storage_handle"] = "%%%"
    with pytest.raises(ValueError):
        HandshakeReply.from_json(reply)


def test_what_cuda_ipc_cannot_share_is_refused_with_a_reason() -> None:
    with pytest.raises(SharedTensorError, match="CUDA tensors, not cpu"):
        CudaSharedTensor(torch.zeros(2))
    packed = SimpleNamespace(device=torch.device("cuda", 0), is_mkldnn=True, layout=torch.strided)
    with pytest.raises(SharedTensorError, match="dense"):
        CudaSharedTensor(cast(torch.Tensor, packed))
    odd = SimpleNamespace(
        device=torch.device("cuda", 0), is_mkldnn=False, layout=torch.strided, dtype=torch.complex64
    )
    with pytest.raises(SharedTensorError, match="complex64"):
        CudaSharedTensor(cast(torch.Tensor, odd))


def test_attaching_without_cuda_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without a GPU
    with pytest.raises(SharedTensorError, match="no CUDA device"):
        attach_cuda_tensor(CudaTensorHandle.from_json(handle_json()))

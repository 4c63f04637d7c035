"""CUDA tensors shared with a co-located drafter process through torch's own CUDA IPC: the drafter maps
the verifier's device memory, and neither side copies anything.

The owner exports a tensor's storage with `UntypedStorage._share_cuda_()`, as
torch.multiprocessing.reductions.reduce_tensor does when it pickles a CUDA tensor, and sends the result
as plain JSON (CudaTensorHandle: bytes as base64, nothing pickled). The attacher rebuilds the tensor
with torch's `rebuild_cuda_tensor`, which opens each storage once per process (torch caches it).

Each export is meant for one receiver. It carries a fresh slot of torch's cross-process reference
count, which the receiver gives back when its tensors go (or at once, when it had the storage
already); a storage the owner drops stays allocated until every slot was given back, so a drafter
never reads memory the verifier's allocator handed to something else. The owner therefore exports
anew for every reply (CudaSharedTensor.export), never resends a handle, and keeps the tensor itself
for as long as it serves it.

An export also records an event on the owner's current stream, which the attacher's stream waits for
when it opens the handle: the tensor's values as of the export are there. Writes after that (the
feature ring's rows) must be complete before the drafter is told to read them: see
treespec.verifier.feature_publisher.

A process cannot open its own CUDA IPC handles: only another process attaches.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor

from treespec.shared.drafting.shared_tensor import DTYPES, SharedTensorError, check_layout

KIND = "cuda"
IPC_HANDLE_BYTES = 64  # CUDA_IPC_HANDLE_SIZE: a cudaIpcMemHandle_t or a cudaIpcEventHandle_t
MAX_MEMORY_HANDLE_BYTES = 1024  # torch's handle: the 64-byte cudaIpcMemHandle_t after a short header
MAX_REF_COUNTER_NAME_BYTES = 255  # a shared memory file's name (torch's reference counts)
MAX_DEVICES = 128  # c10::DeviceIndex is an int8
MAX_UUID_CHARS = 64
MAX_INT = 2**62  # sizes and offsets: torch reads them as 64-bit integers


@dataclass(frozen=True)
class CudaTensorHandle:
    """What `_share_cuda_()` gives for a tensor's storage, and the tensor's view of it: JSON-able (see
    `to_json`), checked on construction, so that a malformed handle is a ValueError, never a crash."""

    kind: ClassVar[str] = KIND
    shape: tuple[int, ...]
    stride: tuple[int, ...]  # in elements
    storage_offset: int  # in elements
    dtype: str  # a key of DTYPES
    device: int  # the owner's device index
    device_uuid: str  # the owner's GPU, so that an attacher seeing other devices finds it ("": unknown)
    storage_handle: bytes  # the memory handle of the allocation the storage lies in
    storage_size_bytes: int
    storage_offset_bytes: int  # where the storage starts in that allocation
    ref_counter_handle: bytes  # the name of torch's reference count file, and this receiver's slot
    ref_counter_offset: int
    event_handle: bytes  # the owner's event recorded at export
    event_sync_required: bool

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unsupported dtype {self.dtype!r}; known: {', '.join(DTYPES)}")
        if not isinstance(self.shape, tuple) or not self.shape or not all(_is_int(d, 1) for d in self.shape):
            raise ValueError(f"a shared tensor needs a non-empty shape of positive sizes, got {self.shape}")
        if not isinstance(self.stride, tuple) or len(self.stride) != len(self.shape):
            raise ValueError(f"stride {self.stride} does not fit shape {self.shape}")
        _check_ints(self, ("storage_offset", "storage_offset_bytes", "ref_counter_offset"), minimum=0)
        _check_ints(self, ("storage_size_bytes",), minimum=1)
        if not all(_is_int(s, 0) for s in self.stride):
            raise ValueError(f"strides must be non-negative integers, got {self.stride}")
        if not _is_int(self.device, 0) or self.device >= MAX_DEVICES:
            raise ValueError(f"not a CUDA device index: {self.device!r}")
        if not isinstance(self.device_uuid, str) or len(self.device_uuid) > MAX_UUID_CHARS:
            raise ValueError(f"not a device uuid: {self.device_uuid!r}")
        if self.extent_bytes > self.storage_size_bytes:
            raise ValueError(
                f"a {self.shape} view at {self.storage_offset} (stride {self.stride}) reaches past the "
                f"storage's {self.storage_size_bytes} bytes"
            )
        self._check_handles()

    def _check_handles(self) -> None:
        handle, counter, event = self.storage_handle, self.ref_counter_handle, self.event_handle
        if not isinstance(handle, bytes) or not IPC_HANDLE_BYTES <= len(handle) <= MAX_MEMORY_HANDLE_BYTES:
            raise ValueError(f"a CUDA memory handle is {IPC_HANDLE_BYTES} to {MAX_MEMORY_HANDLE_BYTES} bytes")
        if not isinstance(counter, bytes) or not 0 < len(counter) <= MAX_REF_COUNTER_NAME_BYTES:
            raise ValueError(f"a reference count file's name is 1 to {MAX_REF_COUNTER_NAME_BYTES} bytes")
        if b"\0" in counter:  # torch reads it as a C string
            raise ValueError("a reference count file's name holds no NUL byte")
        if not isinstance(event, bytes) or len(event) != IPC_HANDLE_BYTES:
            raise ValueError(f"a CUDA event handle is {IPC_HANDLE_BYTES} bytes")
        if not isinstance(self.event_sync_required, bool):
            raise ValueError(f"event_sync_required must be a boolean, got {self.event_sync_required!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def extent_bytes(self) -> int:
        """Bytes from the storage's start to the view's last element's end."""
        last = self.storage_offset + sum((d - 1) * s for d, s in zip(self.shape, self.stride, strict=True))
        return (last + 1) * self.torch_dtype.itemsize

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "shape": list(self.shape),
            "stride": list(self.stride),
            "storage_offset": self.storage_offset,
            "dtype": self.dtype,
            "device": self.device,
            "device_uuid": self.device_uuid,
            "storage_handle": _b64(self.storage_handle),
            "storage_size_bytes": self.storage_size_bytes,
            "storage_offset_bytes": self.storage_offset_bytes,
            "ref_counter_handle": _b64(self.ref_counter_handle),
            "ref_counter_offset": self.ref_counter_offset,
            "event_handle": _b64(self.event_handle),
            "event_sync_required": self.event_sync_required,
        }

    @classmethod
    def from_json(cls, data: Any) -> CudaTensorHandle:
        """Raises ValueError for anything that is not a well-formed handle (it comes off a socket)."""
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise ValueError(f"not a CUDA tensor handle: {data!r}")
        shape, stride = data.get("shape"), data.get("stride")
        if not isinstance(shape, list) or not isinstance(stride, list):
            raise ValueError(f"a CUDA tensor handle needs shape and stride lists: {data!r}")
        # Each value is checked on construction.
        return cls(
            shape=tuple(shape),
            stride=tuple(stride),
            storage_offset=_field(data, "storage_offset"),
            dtype=str(_field(data, "dtype")),
            device=_field(data, "device"),
            device_uuid=_field(data, "device_uuid", ""),
            storage_handle=_bytes(data, "storage_handle"),
            storage_size_bytes=_field(data, "storage_size_bytes"),
            storage_offset_bytes=_field(data, "storage_offset_bytes"),
            ref_counter_handle=_bytes(data, "ref_counter_handle"),
            ref_counter_offset=_field(data, "ref_counter_offset"),
            event_handle=_bytes(data, "event_handle"),
            event_sync_required=_field(data, "event_sync_required"),
        )


class CudaSharedTensor:
    """The owner's side: `tensor` itself, exported in place (no copy) to each receiver by `export`.
    Holding this object holds the tensor, so its memory stays while the owner serves it."""

    def __init__(self, tensor: torch.Tensor) -> None:
        """Raises SharedTensorError for a tensor that is not a dense CUDA one of a supported dtype."""
        check_cuda_shareable(tensor)
        self.tensor = tensor
        self._stopped = False

    def export(self) -> CudaTensorHandle:
        """A handle for one receiver (see the module's docstring: never send one twice)."""
        if self._stopped:
            raise SharedTensorError("this CUDA tensor is no longer shared (its server closed)")
        t = self.tensor
        try:
            shared = t.untyped_storage()._share_cuda_()
        except RuntimeError as exc:  # e.g. a tensor this process itself received over CUDA IPC
            raise SharedTensorError(f"cannot export a CUDA tensor over CUDA IPC: {exc}") from exc
        device, handle, size, offset, counter, counter_offset, event, sync = shared
        if handle is None:
            raise SharedTensorError("a CUDA tensor without memory cannot be shared")
        return CudaTensorHandle(
            shape=tuple(t.shape),
            stride=tuple(t.stride()),
            storage_offset=int(t.storage_offset()),
            dtype=str(t.dtype).removeprefix("torch."),
            device=int(device),
            device_uuid=_device_uuid(int(device)),
            storage_handle=handle,
            storage_size_bytes=int(size),
            storage_offset_bytes=int(offset),
            ref_counter_handle=counter,
            ref_counter_offset=int(counter_offset),
            event_handle=event,
            event_sync_required=bool(sync),
        )

    def unlink(self) -> None:
        """Stop exporting (named after SharedTensor.unlink; there is no name to remove here). Handles
        already sent stay valid: their receivers keep the memory until their tensors go."""
        self._stopped = True


def attach_cuda_tensor(handle: CudaTensorHandle) -> torch.Tensor:
    """The owner's tensor, the same device memory: writes on either side are seen by the other (once
    the writer's stream has run them). Raises SharedTensorError when this process cannot open it."""
    if not torch.cuda.is_available():
        raise SharedTensorError("the verifier shares CUDA tensors, but this process sees no CUDA device")
    device = local_device(handle)
    try:
        return rebuild_cuda_tensor(
            torch.Tensor,
            torch.Size(handle.shape),
            handle.stride,
            handle.storage_offset,
            torch.UntypedStorage,
            handle.torch_dtype,
            device,
            handle.storage_handle,
            handle.storage_size_bytes,
            handle.storage_offset_bytes,
            False,  # requires_grad
            handle.ref_counter_handle,
            handle.ref_counter_offset,
            handle.event_handle,
            handle.event_sync_required,
        )
    except RuntimeError as exc:
        raise SharedTensorError(
            f"cannot open the CUDA IPC handle of a shared {handle.dtype} tensor on cuda:{device} (the "
            f"owner must be another, running process on the same machine): {exc}"
        ) from exc


def local_device(handle: CudaTensorHandle) -> int:
    """This process's index of the owner's GPU: by uuid, since CUDA_VISIBLE_DEVICES may number the
    devices differently here; by the owner's index when it sent no uuid."""
    count = torch.cuda.device_count()
    if handle.device_uuid:
        for index in range(count):
            if _device_uuid(index) == handle.device_uuid:
                return index
        raise SharedTensorError(
            f"the verifier's GPU {handle.device_uuid} is not visible to this process (CUDA_VISIBLE_DEVICES?)"
        )
    if handle.device >= count:
        raise SharedTensorError(f"the verifier's cuda:{handle.device} is not visible: {count} device(s) here")
    return handle.device


def check_cuda_shareable(tensor: torch.Tensor) -> None:
    if tensor.device.type != "cuda":
        raise SharedTensorError(f"CUDA IPC shares CUDA tensors, not {tensor.device} ones")
    check_layout(tensor)


def _device_uuid(index: int) -> str:
    return str(getattr(torch.cuda.get_device_properties(index), "uuid", ""))[:MAX_UUID_CHARS]


def _is_int(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_INT


def _check_ints(handle: CudaTensorHandle, names: tuple[str, ...], minimum: int) -> None:
    for name in names:
        value = getattr(handle, name)
        if not _is_int(value, minimum):
            raise ValueError(f"{name} must be an integer of at least {minimum}, got {value!r}")


def _field(data: dict[str, Any], name: str, default: Any = None) -> Any:
    """A JSON value, of any type: the constructor checks it (raising ValueError)."""
    return data.get(name, default)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _bytes(data: dict[str, Any], name: str) -> bytes:
    """A base64 field's bytes."""
    text = data.get(name)
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a base64 string, got {text!r}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{name} is not valid base64: {exc}") from exc

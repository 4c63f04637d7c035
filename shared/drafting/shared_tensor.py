"""CPU tensors in POSIX shared memory, so that a co-located drafter process maps the verifier's memory
instead of receiving copies.

The owner (the verifier) creates a segment with `multiprocessing.shared_memory`, which names it,
sizes it and registers it with Python's resource tracker (so that a crashed owner's segment is still
removed). Both sides then map the segment's file with `mmap` and wrap the mapping in a tensor: the
tensor alone keeps the mapping alive, so nothing has to be closed while tensors still point into it.

Attachers never create a `SharedMemory` object. Before Python 3.13 every `SharedMemory` registers
with the resource tracker, which unlinks "leaked" segments when its process exits (and a spawned
child shares its parent's tracker, so unregistering would cancel the owner's registration too).
Mapping the file directly keeps attachers out of the tracker: only the owner ever unlinks.

Linux only (segments are files under /dev/shm). CUDA tensors are shared in place through CUDA IPC
instead (cuda_ipc.py); on the wire a handle says which kind it is (colocation_wire.py).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
from dataclasses import dataclass
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any, ClassVar

import torch

SHM_DIR = Path("/dev/shm")
NAME_PREFIX = "treespec-"
KIND = "shm"  # a handle's "kind" on the wire; handles without one (older verifiers) are of this kind
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")  # a plain file name under SHM_DIR: no "/", no ".."
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
}


class SharedTensorError(RuntimeError):
    pass


@dataclass(frozen=True)
class TensorHandle:
    """What an attacher needs to map a shared tensor: small and JSON-able (see `to_json`)."""

    kind: ClassVar[str] = KIND
    name: str  # the segment's name (a file under /dev/shm)
    shape: tuple[int, ...]
    dtype: str  # a key of DTYPES

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or self.name.strip(".") == "":
            raise ValueError(f"not a shared memory segment name: {self.name!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unsupported dtype {self.dtype!r}; known: {', '.join(DTYPES)}")
        if not self.shape or any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in self.shape):
            raise ValueError(f"a shared tensor needs a non-empty shape of positive sizes, got {self.shape}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.torch_dtype.itemsize

    def to_json(self) -> dict[str, Any]:
        return {"kind": KIND, "name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: Any) -> TensorHandle:
        """Raises ValueError for anything that is not a well-formed handle."""
        if not isinstance(data, dict) or not isinstance(data.get("shape"), list):
            raise ValueError(f"not a tensor handle: {data!r}")
        if data.get("kind", KIND) != KIND or not isinstance(data.get("name"), str):
            raise ValueError(f"not a shared memory tensor handle: {data!r}")
        return cls(data["name"], tuple(data["shape"]), str(data.get("dtype")))


class SharedTensor:
    """The owner's side: a new zero-filled segment, mapped as `tensor`. `copy_of` moves an existing
    tensor there: use the shared copy from then on (and drop the original, so that memory holds one
    copy). `unlink` when done; mappings made before stay valid until their tensors go."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        handle = TensorHandle(_new_name(), tuple(shape), str(dtype).removeprefix("torch."))
        self.handle = handle
        self._unlinked = False
        self._segment = SharedMemory(handle.name, create=True, size=handle.nbytes)
        try:
            self._segment.close()  # its own mapping: ours comes from _map, owned by the tensor
            _reserve(handle)
            self.tensor = _map(handle)
        except BaseException:
            self.unlink()
            raise

    @classmethod
    def copy_of(cls, source: torch.Tensor) -> SharedTensor:
        """Raises SharedTensorError for a tensor that is not a dense CPU one (a CUDA one is shared in
        place instead: cuda_ipc.CudaSharedTensor)."""
        _check_shareable(source)
        shared = cls(tuple(source.shape), source.dtype)
        shared.tensor.copy_(source)
        return shared

    def export(self) -> TensorHandle:
        """The handle to send (the same for every receiver: mapping a segment counts nothing)."""
        return self.handle

    def unlink(self) -> None:
        """Remove the segment's name (idempotent); its memory goes when the last mapping does."""
        if self._unlinked:
            return
        self._unlinked = True
        with contextlib.suppress(FileNotFoundError):
            self._segment.unlink()


def attach_tensor(handle: TensorHandle) -> torch.Tensor:
    """Map a segment another process shares: writes on either side are seen by the other."""
    return _map(handle)


def check_layout(tensor: torch.Tensor) -> None:
    """Either kind of sharing sends a dense tensor of a DTYPES dtype."""
    if tensor.is_mkldnn or tensor.layout != torch.strided:
        raise SharedTensorError("only dense tensors can be shared (share a packed weight's to_dense())")
    if str(tensor.dtype).removeprefix("torch.") not in DTYPES:
        raise SharedTensorError(f"cannot share a {tensor.dtype} tensor; supported: {', '.join(DTYPES)}")


def _check_shareable(tensor: torch.Tensor) -> None:
    if tensor.device.type == "cuda":
        raise SharedTensorError(
            "a CUDA tensor is shared in place through CUDA IPC (cuda_ipc.CudaSharedTensor), not copied "
            "into POSIX shared memory"
        )
    if tensor.device.type != "cpu":
        raise SharedTensorError(f"only CPU and CUDA tensors can be shared, not {tensor.device} ones")
    check_layout(tensor)


def _new_name() -> str:
    return f"{NAME_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"


def _reserve(handle: TensorHandle) -> None:
    """Allocate the pages now: a full /dev/shm (64 MiB in a default container) then fails here with a
    clear error, instead of SIGBUS on the first write past its end."""
    fd = os.open(SHM_DIR / handle.name, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, handle.nbytes)
    except OSError as exc:
        raise SharedTensorError(
            f"cannot reserve {handle.nbytes / 2**20:.1f} MiB in {SHM_DIR} ({exc.strerror}): "
            "make it larger (docker: --shm-size)"
        ) from exc
    finally:
        os.close(fd)


def _map(handle: TensorHandle) -> torch.Tensor:
    # O_RDWR without O_CREAT: a segment that is gone is an error here, never a new empty file.
    try:
        fd = os.open(SHM_DIR / handle.name, os.O_RDWR)
    except FileNotFoundError as exc:
        raise SharedTensorError(f"shared memory segment {handle.name!r} does not exist (any more)") from exc
    try:
        size = os.fstat(fd).st_size
        if size < handle.nbytes:
            raise SharedTensorError(f"segment {handle.name!r} holds {size} bytes, {handle.nbytes} expected")
        mapping = mmap.mmap(fd, handle.nbytes)  # MAP_SHARED: both processes see every write
    finally:
        os.close(fd)
    # The tensor holds a reference to the mapping, which is unmapped once no tensor uses it.
    flat = torch.frombuffer(mapping, dtype=handle.torch_dtype, count=handle.numel)
    return flat.view(handle.shape)

"""The co-location handshake's messages and transport: one JSON line each way over a Unix socket.

The drafter process connects to the verifier's socket and sends a HandshakeRequest (the features it
wants, if any, and the ring capacity); the verifier answers with a HandshakeReply (the target's
sizes and the handles of its embedding, lm_head and feature ring) or `{"error": ...}`. A handle is of
one of two kinds, by its "kind" field: "shm", a POSIX shared memory segment (a CPU target;
shared_tensor.py; the field may be missing, as older verifiers sent none), or "cuda", a CUDA IPC
handle of device memory (a CUDA target; cuda_ipc.py).
Handles name memory to map, so they travel over a Unix domain socket only (file permissions and the
peer's uid say who may ask), never over the network: private_socket.socket_path refuses anything
else.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

from treespec.shared.drafting import cuda_ipc, shared_tensor
from treespec.shared.drafting.cuda_ipc import CudaTensorHandle
from treespec.shared.drafting.features import FeatureSpec
from treespec.shared.drafting.shared_tensor import TensorHandle

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024


# A shared tensor's handle: a CPU target's shared memory segment or a CUDA target's device memory.
AnyHandle = TensorHandle | CudaTensorHandle


class ColocationError(RuntimeError):
    """The handshake failed, or the verifier refused it (its message says why)."""


def handle_from_json(data: Any) -> AnyHandle:
    """Either kind of handle, by its "kind" (shared memory when there is none). Raises ValueError for
    anything else: a handle comes off a socket, and is only ever parsed as JSON, never unpickled."""
    kind = data.get("kind", shared_tensor.KIND) if isinstance(data, dict) else None
    if kind == cuda_ipc.KIND:
        return CudaTensorHandle.from_json(data)
    if kind == shared_tensor.KIND:
        return TensorHandle.from_json(data)
    raise ValueError(f"not a tensor handle: {data!r}")


@dataclass(frozen=True)
class SharedView:
    """A target tensor as a shared one, or the transpose of one (a tied head is the embedding)."""

    tensor: AnyHandle
    transposed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"tensor": self.tensor.to_json(), "transposed": self.transposed}

    @classmethod
    def from_json(cls, data: Any) -> SharedView:
        if not isinstance(data, dict):
            raise ValueError(f"not a shared view: {data!r}")
        return cls(handle_from_json(data.get("tensor")), bool(data.get("transposed", False)))


@dataclass(frozen=True)
class HandshakeRequest:
    """`spec` None: only the target's tensors (no ring); else a ring of `capacity` rows for it."""

    spec: FeatureSpec | None = None
    capacity: int = 0

    def to_json(self) -> dict[str, Any]:
        spec = None
        if self.spec is not None:
            spec = {"hidden_size": self.spec.hidden_size, "aux_layer_ids": list(self.spec.aux_layer_ids)}
        return {"version": PROTOCOL_VERSION, "spec": spec, "capacity": self.capacity}

    @classmethod
    def from_json(cls, data: Any) -> HandshakeRequest:
        if not isinstance(data, dict) or data.get("version") != PROTOCOL_VERSION:
            raise ValueError(f"expected a version {PROTOCOL_VERSION} handshake, got {data!r}")
        raw = data.get("spec")
        if raw is None:
            return cls()
        ids = raw.get("aux_layer_ids", []) if isinstance(raw, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ValueError(f"not a feature spec: {raw!r}")
        capacity = data.get("capacity")
        if not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"a feature ring needs a positive capacity, got {capacity!r}")
        return cls(FeatureSpec(int(raw["hidden_size"]), tuple(ids)), capacity)


@dataclass(frozen=True)
class HandshakeReply:
    num_layers: int
    hidden_size: int
    vocab_size: int
    embed: SharedView  # [vocab, hidden]
    lm_head: SharedView  # [hidden, vocab] (dense, for treespec.shared.model.linear.linear)
    step_weights: int  # weights one target forward step multiplies by (ModelConfig.step_weights)
    ring: AnyHandle | None = None  # [capacity, spec.width], when a spec was asked for

    def to_json(self) -> dict[str, Any]:
        return {
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "embed": self.embed.to_json(),
            "lm_head": self.lm_head.to_json(),
            "step_weights": self.step_weights,
            "ring": None if self.ring is None else self.ring.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> HandshakeReply:
        if not isinstance(data, dict):
            raise ValueError(f"not a handshake reply: {data!r}")
        if "error" in data:
            raise ColocationError(f"the verifier refused the co-location handshake: {data['error']}")
        ring = data.get("ring")
        return cls(
            num_layers=int(data["num_layers"]),
            hidden_size=int(data["hidden_size"]),
            vocab_size=int(data["vocab_size"]),
            embed=SharedView.from_json(data.get("embed")),
            lm_head=SharedView.from_json(data.get("lm_head")),
            step_weights=int(data["step_weights"]),
            ring=None if ring is None else handle_from_json(ring),
        )


def send_json(sock: socket.socket, data: dict[str, Any]) -> None:
    sock.sendall(json.dumps(data).encode() + b"\n")


def recv_json(sock: socket.socket) -> Any:
    """One newline-terminated JSON message (at most MAX_MESSAGE_BYTES)."""
    buffer = bytearray()
    while not buffer.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise ColocationError("the co-location peer closed the connection mid-message")
        buffer += chunk
        if len(buffer) > MAX_MESSAGE_BYTES:
            raise ColocationError(f"co-location message over {MAX_MESSAGE_BYTES} bytes")
    try:
        return json.loads(buffer)
    except json.JSONDecodeError as exc:
        raise ColocationError(f"malformed co-location message: {exc}") from exc

"""The drafter's side of co-location: TargetAccess over the verifier's shared memory.

A drafter process started with `treespec drafter --colocate PATH` gets this as `context.target`. Its
first call does the handshake with the verifier's ColocationServer (colocation.py) and maps what the
reply names; the embedding, the head and the ring are then the verifier's own memory, and each
segment is mapped once, however many views of it the drafter takes.

A CUDA target's handles open the verifier's device memory (cuda_ipc.py), so the tensors are CUDA
tensors on the verifier's GPU, and a drafter that places its work by them (the EAGLE drafter takes
the embedding's device) drafts on that GPU.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import torch

from treespec.shared.drafting.colocation_wire import (
    AnyHandle,
    ColocationError,
    HandshakeReply,
    HandshakeRequest,
    SharedView,
    recv_json,
    send_json,
)
from treespec.shared.drafting.cuda_ipc import CudaTensorHandle, attach_cuda_tensor
from treespec.shared.drafting.features import FeatureRing, FeatureSpec
from treespec.shared.drafting.shared_tensor import attach_tensor
from treespec.shared.drafting.target_access import TargetAccess, TargetTensors
from treespec.shared.rpc.private_socket import socket_path

log = logging.getLogger(__name__)

RETRY_S = 0.1
REPLY_TIMEOUT_S = 300.0  # the first handshake copies the target's embedding into shared memory


class ColocatedTargetAccess(TargetAccess):
    """`connect_timeout_s`: how long to wait for the verifier's socket to appear (the verifier may
    still be loading its model when the drafter starts)."""

    def __init__(self, path: str | os.PathLike[str], connect_timeout_s: float = 120.0) -> None:
        self.path = socket_path(path)
        self.connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._segments: dict[str, torch.Tensor] = {}
        self._tensors: TargetTensors | None = None
        self._ring: FeatureRing | None = None

    def tensors(self) -> TargetTensors:
        with self._lock:
            if self._tensors is None:
                self._adopt(self._handshake(HandshakeRequest()))
            assert self._tensors is not None
            return self._tensors

    def feature_ring(self, spec: FeatureSpec, capacity: int) -> FeatureRing:
        """The verifier's ring for `spec` (it may hold more than `capacity` rows, if another drafter
        asked for more first). Raises ColocationError when the verifier refuses the spec."""
        with self._lock:
            if self._ring is None or self._ring.spec != spec:
                reply = self._handshake(HandshakeRequest(spec, capacity))
                self._adopt(reply)
                if reply.ring is None:
                    raise ColocationError("the verifier sent no feature ring")
                self._ring = FeatureRing(spec, self._attach(reply.ring))
            return self._ring

    # ---- internals ---------------------------------------------------------------------------------

    def _handshake(self, request: HandshakeRequest) -> HandshakeReply:
        with self._connect() as conn:
            send_json(conn, request.to_json())
            answer = recv_json(conn)
        try:
            return HandshakeReply.from_json(answer)
        except (KeyError, TypeError, ValueError) as exc:
            raise ColocationError(f"malformed co-location reply: {exc!r}") from exc

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.connect_timeout_s
        waited = False
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(REPLY_TIMEOUT_S)
            try:
                conn.connect(os.fspath(self.path))
                return conn
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                conn.close()
                if time.monotonic() >= deadline:
                    raise ColocationError(f"no verifier co-location socket at {self.path}: {exc}") from exc
            except BaseException:
                conn.close()
                raise
            if not waited:
                waited = True
                log.info("waiting for the verifier's co-location socket at %s", self.path)
            time.sleep(RETRY_S)

    def _adopt(self, reply: HandshakeReply) -> None:
        embed, lm_head = self._view(reply.embed), self._view(reply.lm_head)
        vocab, hidden = reply.vocab_size, reply.hidden_size
        if tuple(embed.shape) != (vocab, hidden) or tuple(lm_head.shape) != (hidden, vocab):
            raise ColocationError(
                f"shared embed {tuple(embed.shape)} / lm_head {tuple(lm_head.shape)} do not fit "
                f"vocab {vocab}, hidden {hidden}"
            )
        self._tensors = TargetTensors(embed, lm_head, reply.num_layers, hidden, vocab, reply.step_weights)

    def _view(self, view: SharedView) -> torch.Tensor:
        tensor = self._attach(view.tensor)
        return tensor.t() if view.transposed else tensor

    def _attach(self, handle: AnyHandle) -> torch.Tensor:
        if isinstance(handle, CudaTensorHandle):
            # Every CUDA handle goes through torch's rebuild, which maps each storage once per process
            # and holds the handle's reference count slot while its tensors live (or gives it back at
            # once, for a storage mapped already): the verifier's allocator keeps the memory till then.
            return attach_cuda_tensor(handle)
        if handle.name not in self._segments:
            self._segments[handle.name] = attach_tensor(handle)
        return self._segments[handle.name]

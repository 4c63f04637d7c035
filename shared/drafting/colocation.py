"""The verifier's side of co-location: a Unix socket where a drafter process on the same machine
asks for the target's tensors and a feature ring, and gets handles to map them back: POSIX shared
memory for a CPU target, CUDA IPC handles of the target's device memory for a CUDA one.

Starting the server shares the target's embedding and lm_head (shared_target.py: moved into shared
memory on CPU, exported in place on CUDA); a handshake with a FeatureSpec creates the ring the
verifier publishes features into (its `feature_ring`), or reuses it for the same spec, so that a
restarted drafter or a second replica reads the same rows. One spec per verifier: the engine
captures one set of features per step. The drafter's side is ColocatedTargetAccess
(colocated_access.py); messages: colocation_wire.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading

import torch

from treespec.shared.drafting.colocation_wire import (
    ColocationError,
    HandshakeReply,
    HandshakeRequest,
    recv_json,
    send_json,
)
from treespec.shared.drafting.cuda_ipc import CudaSharedTensor
from treespec.shared.drafting.features import FeatureRing, FeatureSpec
from treespec.shared.drafting.shared_target import Segment, SharedTarget, share_target
from treespec.shared.drafting.shared_tensor import SharedTensor, SharedTensorError
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.rpc.private_socket import SocketInUseError, bind_private, peer_credentials, socket_path

log = logging.getLogger(__name__)

SHAREABLE_DEVICES = ("cpu", "cuda")  # POSIX shared memory, CUDA IPC
ACCEPT_POLL_S = 0.2  # how soon the server thread notices `close`
PEER_TIMEOUT_S = 5.0  # a connected peer that says nothing is dropped after this


class ColocationServer:
    """Listens on `path` (AF_UNIX only, mode 0600) in a daemon thread once started.

    A target on CPU or CUDA: other devices are refused up front (nothing here could share them). The
    server holds what it shares (a CUDA target's embedding, head and ring included) as long as it
    lives, so that handles it sent keep pointing at live memory.
    """

    def __init__(self, path: str | os.PathLike[str], model: CausalLM) -> None:
        if model.device.type not in SHAREABLE_DEVICES:
            raise ColocationError(
                f"co-location shares CPU memory (POSIX shared memory) or CUDA memory (CUDA IPC); the "
                f"target is on {model.device}. Run the drafter in process instead"
            )
        self.path = socket_path(path)
        self.model = model
        self._lock = threading.Lock()
        self._target: SharedTarget | None = None
        self._ring: FeatureRing | None = None
        self._ring_segment: Segment | None = None
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="colocation", daemon=True)

    @property
    def feature_ring(self) -> FeatureRing | None:
        """The ring to publish into: None until a drafter asked for features."""
        return self._ring

    def start(self) -> ColocationServer:
        """Bind the socket and share the target's embedding and head here, in the calling thread (on
        CPU the copies are parallel torch operations, and one thread should do all of a process's: see
        VerifierServer.prepare); then answer drafters in the background. Raises SharedTensorError when
        sharing fails."""
        try:
            self._listener = bind_private(self.path)
        except SocketInUseError as exc:
            raise ColocationError(f"co-location: {exc}") from exc
        try:
            self._export_target()
        except BaseException:
            self.close()
            raise
        self._thread.start()
        log.info("co-location socket at %s", self.path)
        return self

    def close(self) -> None:
        """Stop listening, remove the socket file, unlink the shared segments (idempotent). Drafters
        that attached keep their mappings; nothing new can attach. (CUDA memory has no name to
        remove: its exports stop, and the server still holds the tensors.)"""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        with self._lock:
            if self._target is not None:
                self._target.unlink()
            if self._ring_segment is not None:
                self._ring_segment.unlink()

    def __enter__(self) -> ColocationServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def handshake(self, request: HandshakeRequest) -> HandshakeReply:
        """Share what the request needs (once) and say where it lies: handles for one receiver (a CUDA
        export counts its receivers, so each reply gets its own). Raises ValueError for a spec this
        target cannot publish, ColocationError or SharedTensorError when sharing fails."""
        c = self.model.config
        target = self._export_target()
        with self._lock:
            embed, lm_head = target.views()
            ring = None if request.spec is None else self._ring_for(request.spec, request.capacity).export()
        return HandshakeReply(c.num_layers, c.hidden_size, c.vocab_size, embed, lm_head, c.step_weights, ring)

    # ---- internals ---------------------------------------------------------------------------------

    def _export_target(self) -> SharedTarget:
        """The model's embedding and head, shared (once)."""
        with self._lock:
            if self._target is None:
                self._target = share_target(self.model)
            return self._target

    def _ring_for(self, spec: FeatureSpec, capacity: int) -> Segment:
        _check_spec(spec, self.model)
        if self._ring is not None and self._ring_segment is not None:
            if self._ring.spec != spec:
                raise ValueError(
                    f"this verifier already publishes {self._ring.spec}; one feature spec per verifier "
                    f"(asked for {spec})"
                )
            if capacity > self._ring.capacity:
                raise ValueError(
                    f"the feature ring holds {self._ring.capacity} rows; {capacity} asked (restart the "
                    "verifier to grow it)"
                )
            return self._ring_segment
        segment = self._new_ring((capacity, spec.width))
        self._ring_segment = segment
        self._ring = FeatureRing(spec, segment.tensor)
        log.info("publishing target features %s into a ring of %d rows", spec, capacity)
        return segment

    def _new_ring(self, shape: tuple[int, int]) -> Segment:
        """A zero-filled ring beside the model: in shared memory on CPU, in the model's device memory
        on CUDA (exported in place)."""
        if self.model.device.type == "cuda":
            return CudaSharedTensor(torch.zeros(shape, dtype=self.model.dtype, device=self.model.device))
        return SharedTensor(shape, self.model.dtype)

    def _serve(self) -> None:
        listener = self._listener
        assert listener is not None
        listener.settimeout(ACCEPT_POLL_S)
        while not self._stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                log.warning("co-location socket failed: %r", exc)
                return
            with conn:
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        """One handshake per connection; a peer's mistake is answered, never raised."""
        conn.settimeout(PEER_TIMEOUT_S)
        try:
            pid, uid = peer_credentials(conn)
            if uid != os.geteuid():
                send_json(conn, {"error": f"uid {uid} may not attach to this verifier's memory"})
                return
            request = HandshakeRequest.from_json(recv_json(conn))
            reply = self.handshake(request)
            send_json(conn, reply.to_json())
            log.info("co-located drafter (pid %d) attached (features: %s)", pid, request.spec)
        except (ValueError, KeyError, TypeError, ColocationError, SharedTensorError) as exc:
            log.warning("co-location handshake refused: %s", exc)
            with contextlib.suppress(OSError):
                send_json(conn, {"error": str(exc)})
        except OSError as exc:
            log.warning("co-location peer went away: %r", exc)


def _check_spec(spec: FeatureSpec, model: CausalLM) -> None:
    """Refused here rather than failing the engine's forward: a wrong width or layer would break
    every step of the verifier, not only the drafter."""
    c = model.config
    if spec.hidden_size != c.hidden_size:
        raise ValueError(f"feature hidden_size {spec.hidden_size} != the target's {c.hidden_size}")
    ids = spec.aux_layer_ids
    if len(set(ids)) != len(ids) or any(not 0 <= i + 1 < c.num_layers for i in ids):
        raise ValueError(f"aux_layer_ids {ids} must be distinct, in -1..{c.num_layers - 2}")

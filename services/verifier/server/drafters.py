"""Which drafter the verifier asks: none, a registry drafter in-process, or remote drafter servers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.model.causal_lm import CausalLM


@dataclass(frozen=True)
class DrafterSpec:
    """`remote_targets` (host:port addresses, or one `dns:///name:port`): drafts come from drafter
    servers, which run the algorithm (`algorithm` is then only reported). Otherwise `algorithm` is
    a registry name run in-process (with `options`, the plugin's settings); None: plain decoding.
    `colocation_socket`: with remote targets, a Unix socket path where drafter processes on this
    machine attach to the target's tensors and feature ring (CPU only; see ColocationServer)."""

    algorithm: str | None = None
    remote_targets: tuple[str, ...] = ()
    deadline_s: float = 0.05
    options: dict[str, Any] = field(default_factory=dict)
    colocation_socket: str | None = None

    @property
    def enabled(self) -> bool:
        return self.algorithm is not None or bool(self.remote_targets)

    @property
    def name(self) -> str:
        """As ModelInfo reports it ("" when speculation is off)."""
        if self.algorithm is not None:
            return self.algorithm.lower()
        return "remote" if self.remote_targets else ""


@dataclass(frozen=True)
class BuiltDrafter:
    """A drafter built from a spec, with what ends it (remote links and threads) after the engine."""

    drafter: Drafter | None
    shutdown: Callable[[], None]


def build_drafter(spec: DrafterSpec, model: CausalLM, target_path: Path) -> BuiltDrafter:
    vocab_size = model.config.vocab_size
    if spec.remote_targets:
        return _remote(spec, model)
    if spec.algorithm is not None:
        context = DrafterContext(
            vocab_size=vocab_size,
            target_path=target_path,
            options=dict(spec.options),
            target=LocalTargetAccess(model),
        )
        drafter = create_drafter(spec.algorithm, context)
        return BuiltDrafter(drafter, drafter.shutdown)
    return BuiltDrafter(None, _nothing)


def _remote(spec: DrafterSpec, model: CausalLM) -> BuiltDrafter:
    from treespec.verifier.remote_drafter import RemoteDrafter

    targets = spec.remote_targets[0] if len(spec.remote_targets) == 1 else list(spec.remote_targets)
    if spec.colocation_socket is None:
        remote = RemoteDrafter(targets, deadline_s=spec.deadline_s)
        return BuiltDrafter(remote, remote.shutdown)
    from treespec.shared.drafting.colocation import ColocationServer

    # Listening before the verifier serves: a drafter started beside it finds the socket.
    server = ColocationServer(spec.colocation_socket, model).start()
    try:
        remote = RemoteDrafter(targets, deadline_s=spec.deadline_s, features=server)
    except BaseException:
        server.close()
        raise

    def shutdown() -> None:
        remote.shutdown()
        server.close()

    return BuiltDrafter(remote, shutdown)


def _nothing() -> None:
    pass

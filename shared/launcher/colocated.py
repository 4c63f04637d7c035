"""A co-located drafter beside a model in this process: a ColocationServer over the model, a real
`treespec drafter --colocate` process attached to it, and the verifier's RemoteDrafter wired to both.
Benchmarks and tests compare it with the same plugin in process:

    with colocated_drafter(model, "eagle3", options, vocab_size, workdir) as co:
        engine = Engine(config, co.remote, model)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treespec.shared.cli.ngram_flags import option_arguments
from treespec.shared.drafting.colocation import ColocationServer
from treespec.shared.launcher.colocation_paths import SOCKET_NAME, draft_socket, local_address
from treespec.shared.launcher.health import grpc_serving
from treespec.shared.launcher.parent_watch import child_env
from treespec.shared.launcher.ports import free_port
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.remote_drafter import RemoteDrafter

LOG_NAME = "drafter.log"
STOP_TIMEOUT_S = 10.0


@dataclass
class ColocatedDrafter:
    remote: RemoteDrafter  # give it to an Engine
    server: ColocationServer
    address: str  # where the verifier's link reaches the drafter: local:PATH, or its gRPC host:port
    process: subprocess.Popen[bytes]  # the `treespec drafter --colocate` process


@contextmanager
def colocated_drafter(
    model: CausalLM,
    kind: str,
    options: dict[str, Any],
    vocab_size: int,
    workdir: Path,
    *,
    deadline_s: float = 5.0,
    ready_timeout_s: float = 120.0,
    env: Mapping[str, str] | None = None,
    local_link: bool = True,
) -> Iterator[ColocatedDrafter]:
    """Ready once yielded; everything stopped on exit. `workdir` holds the sockets and the drafter
    process's log; `env`: more environment for that process (over this one's); `local_link`: the
    Draft stream over the drafter's local socket, as `treespec serve` runs it (else over gRPC)."""
    socket_path = workdir / SOCKET_NAME
    log = workdir / LOG_NAME
    with ExitStack() as stack:
        server = ColocationServer(socket_path, model).start()
        stack.callback(server.close)
        deadline = time.monotonic() + ready_timeout_s
        port = free_port()
        grpc_address = f"127.0.0.1:{port}"
        local = draft_socket(socket_path) if local_link else None
        process = _start_process(kind, options, vocab_size, port, socket_path, local, log, env or {})
        stack.callback(_stop, process)
        # Serving before the link opens: a link to a server still starting would back off.
        _wait(lambda: grpc_serving(grpc_address), process, deadline, log)
        address = grpc_address if local is None else local_address(local)
        remote = RemoteDrafter([address], deadline_s=deadline_s, features=server)
        stack.callback(remote.shutdown)
        _wait(lambda: remote.wait_for_replicas(1, 0.2), process, deadline, log)
        yield ColocatedDrafter(remote, server, address, process)


def _wait(ready: Callable[[], bool], process: subprocess.Popen[bytes], deadline: float, log: Path) -> None:
    while not ready():
        exited = process.poll() is not None
        if exited or time.monotonic() > deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"the co-located drafter did not come up:\n{text[-4000:]}")
        time.sleep(0.1)


def _start_process(
    kind: str,
    options: dict[str, Any],
    vocab_size: int,
    port: int,
    socket_path: Path,
    local: Path | None,
    log: Path,
    env: Mapping[str, str],
) -> subprocess.Popen[bytes]:
    argv = ["drafter", "--kind", kind, "--vocab-size", str(vocab_size), "--port", str(port)]
    argv += ["--colocate", str(socket_path), *option_arguments(options)]
    if local is not None:
        argv += ["--local-socket", str(local)]
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "treespec.shared.cli.main", *argv],
            env={**os.environ, **env, **child_env()},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

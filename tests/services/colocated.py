"""A co-located drafter for tests: a ColocationServer over a model, a drafter server attached to it
(a real `treespec drafter --colocate` process, or one in this process), and the verifier's
RemoteDrafter wired to both. For comparing a co-located plugin with the same plugin in process:

    with colocated_drafter(model, "eagle", options, vocab_size, tmp_path) as co:
        engine = Engine(config, co.remote, model)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treespec.drafter.server.app import DrafterServer
from treespec.shared.cli.ngram_flags import option_arguments
from treespec.shared.drafting.colocated_access import ColocatedTargetAccess
from treespec.shared.drafting.colocation import ColocationServer
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.launcher.ports import free_port
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.remote_drafter import RemoteDrafter

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ColocatedDrafter:
    remote: RemoteDrafter  # give it to an Engine
    server: ColocationServer
    address: str  # the drafter server's
    plugin: Drafter | None = None  # in process only: the plugin behind the server
    process: subprocess.Popen[bytes] | None = None


@contextmanager
def colocated_drafter(
    model: CausalLM,
    kind: str,
    options: dict[str, Any],
    vocab_size: int,
    workdir: Path,
    *,
    in_process: bool = False,
    deadline_s: float = 5.0,
    ready_timeout_s: float = 120.0,
) -> Iterator[ColocatedDrafter]:
    """Everything stopped on exit. `workdir` holds the socket and the drafter process's log."""
    socket_path = workdir / "colocation.sock"
    with ExitStack() as stack:
        server = ColocationServer(socket_path, model).start()
        stack.callback(server.close)
        if in_process:
            context = DrafterContext(vocab_size, options=options, target=ColocatedTargetAccess(socket_path))
            plugin = create_drafter(kind, context)
            drafter_server = DrafterServer(plugin, kind)
            address = f"127.0.0.1:{drafter_server.start()}"
            stack.callback(drafter_server.stop, 0)
            co = ColocatedDrafter(_remote(address, deadline_s, server, stack), server, address, plugin)
        else:
            port = free_port()
            process = _start_process(kind, options, vocab_size, port, socket_path, workdir / "drafter.log")
            stack.callback(_stop, process)
            address = f"127.0.0.1:{port}"
            co = ColocatedDrafter(
                _remote(address, deadline_s, server, stack), server, address, process=process
            )
        _wait_ready(co, ready_timeout_s, workdir / "drafter.log")
        yield co


def _wait_ready(co: ColocatedDrafter, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not co.remote.wait_for_replicas(1, 0.2):
        exited = co.process is not None and co.process.poll() is not None
        if exited or time.monotonic() > deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"the co-located drafter did not come up:\n{text[-4000:]}")


def _remote(address: str, deadline_s: float, server: ColocationServer, stack: ExitStack) -> RemoteDrafter:
    remote = RemoteDrafter([address], deadline_s=deadline_s, features=server)
    stack.callback(remote.shutdown)
    return remote


def _start_process(
    kind: str, options: dict[str, Any], vocab_size: int, port: int, socket_path: Path, log: Path
) -> subprocess.Popen[bytes]:
    argv = ["drafter", "--kind", kind, "--vocab-size", str(vocab_size), "--port", str(port)]
    argv += ["--colocate", str(socket_path), *option_arguments(options)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "treespec.shared.cli.main", *argv],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

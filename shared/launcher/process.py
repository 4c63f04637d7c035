"""A child service process: started, probed for readiness, stopped politely then firmly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from treespec.shared.launcher.parent_watch import child_env


@dataclass
class ServiceProcess:
    name: str
    argv: Sequence[str]  # `treespec` arguments, e.g. ["verifier", "--port", "50051"]
    ready: Callable[[], bool]
    env: dict[str, str] = field(default_factory=dict)
    # Whether the server can go on without it: a drafter that dies costs speed, not requests, so the
    # supervisor restarts it; an essential service (verifier, gateway) that dies stops everything.
    essential: bool = True
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "treespec.shared.cli.main", *self.argv]
        # Its own process group: Ctrl-C reaches the launcher, which stops the children in order.
        self.popen = subprocess.Popen(
            command, env={**os.environ, **self.env, **child_env()}, start_new_session=True
        )

    @property
    def exit_code(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

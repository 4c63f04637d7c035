"""A service started by a treespec launcher stops when that launcher dies.

`treespec serve` and the benchmarks start their services as child processes and stop them on the way
out. A launcher killed outright (SIGKILL, the OOM killer, a crashed terminal) cannot: its children,
each in its own session, would go on holding their ports, their memory and the CPU cores. So the
launcher names itself in the child's environment (`child_env`), and the child's `treespec` command
watches its parent (`watch_parent`): once it is gone (the child re-parented), the child sends itself
SIGTERM, which stops it as a user's Ctrl-C would, and SIGKILL if that has not ended it within
`grace_s`. A thread polls `os.getppid()`: it works on every POSIX system and, unlike Linux's
PR_SET_PDEATHSIG, does not fire when the launcher's starting thread (rather than the launcher) ends.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

PARENT_ENV = "TREESPEC_PARENT_PID"


def child_env() -> dict[str, str]:
    """Environment for a child service: this process is its launcher."""
    return {PARENT_ENV: str(os.getpid())}


def _stop_self(grace_s: float) -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class ParentWatch:
    parent_pid: int
    poll_s: float = 0.5
    grace_s: float = 30.0  # after SIGTERM, how long a graceful stop may take
    on_orphan: Callable[[float], None] = _stop_self  # called with grace_s once the parent is gone
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> ParentWatch:
        self._thread = threading.Thread(target=self._run, name="parent-watch", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while os.getppid() == self.parent_pid:
            time.sleep(self.poll_s)
        log.warning("the launcher (pid %d) is gone: stopping", self.parent_pid)
        self.on_orphan(self.grace_s)


def watch_parent(environ: MutableMapping[str, str]) -> ParentWatch | None:
    """Watch the launcher named in `environ`, if any; the name is taken out of `environ`, so that this
    process's own children do not watch a process that is not their parent."""
    value = environ.pop(PARENT_ENV, None)
    if value is None:
        return None
    try:
        parent_pid = int(value)
    except ValueError:
        log.warning("ignoring %s=%r: not a process id", PARENT_ENV, value)
        return None
    return ParentWatch(parent_pid).start()

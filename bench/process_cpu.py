"""A process's CPU time so far (user and system, all its threads), read from Linux's /proc: what a
service spent on a stretch of work, measured from outside it."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float | None:
    """None where /proc does not tell (another OS, the process gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

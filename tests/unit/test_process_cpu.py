"""A process's CPU time from /proc: this process's grows as it computes; a process that is gone has none."""

from __future__ import annotations

import os
import subprocess
import sys

from treespec.bench.process_cpu import cpu_seconds


def test_a_process_s_cpu_time_grows_as_it_computes() -> None:
    before = cpu_seconds(os.getpid())
    assert before is not None
    total = sum(i * i for i in range(3_000_000))
    after = cpu_seconds(os.getpid())
    assert total > 0 and after is not None and after > before


def test_a_process_that_is_gone_tells_nothing() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert cpu_seconds(child.pid) is None

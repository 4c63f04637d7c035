"""A service started by a launcher that is killed outright (SIGKILL: no chance to stop its children)
stops by itself: the real `treespec drafter` process, started the way `treespec serve` starts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from treespec.shared.launcher.ports import free_port

LAUNCHER = textwrap.dedent(
    """
    import sys, time
    from treespec.shared.launcher.health import grpc_serving
    from treespec.shared.launcher.process import ServiceProcess

    address = f"127.0.0.1:{sys.argv[1]}"
    argv = ["drafter", "--kind", "ngram", "--vocab-size", "1000", "--port", sys.argv[1]]
    service = ServiceProcess("drafter", argv, lambda: grpc_serving(address))
    service.start()
    deadline = time.monotonic() + 120
    while not service.ready():
        assert service.exit_code is None and time.monotonic() < deadline, "the drafter did not start"
        time.sleep(0.1)
    print(service.popen.pid, flush=True)
    time.sleep(600)
    """
)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_service_stops_when_its_launcher_is_killed() -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(free_port())], stdout=subprocess.PIPE, text=True
    )
    assert launcher.stdout is not None
    line = launcher.stdout.readline()
    assert line.strip(), f"the launcher exited with {launcher.wait()} before its service was ready"
    service_pid = int(line)
    try:
        assert not _gone(service_pid)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 30
        while not _gone(service_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(service_pid), "the service outlived its launcher"
    finally:
        if not _gone(service_pid):
            os.kill(service_pid, signal.SIGKILL)

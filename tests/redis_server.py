"""A throwaway redis-server for tests: no persistence, loopback only, on a free port; it can be killed
(a crash, not a shutdown) and started again on the same port (a restart the clients must survive), or
hung (stopped by a signal: it holds its connections and answers nothing) and resumed."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time

from treespec.shared.launcher.ports import free_port

START_TIMEOUT_S = 5.0


class RedisServer:
    def __init__(self, binary: str = "redis-server", port: int | None = None) -> None:
        path = shutil.which(binary)
        if path is None:
            raise FileNotFoundError(f"{binary!r} is not on PATH (apt-get install redis-server)")
        self._binary = path
        self.port = port if port is not None else free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Starts (or restarts, on the same port) and returns once the server answers PING."""
        if self.running:
            return
        command = [self._binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no"]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_until_ready()

    def stop(self) -> None:
        """SIGKILL: the server vanishes without a goodbye to its clients, as in a crash."""
        if self._process is None:
            return
        self._process.kill()
        self._process.wait()
        if self._process.stderr is not None:
            self._process.stderr.close()
        self._process = None

    def hang(self) -> None:
        """SIGSTOP: the server keeps its sockets open and accepts connections, but answers nothing."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: a hung server answers again, everything it held intact."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                stderr = self._process.stderr.read().decode() if self._process.stderr else ""
                raise RuntimeError(f"redis-server exited at start-up: {stderr.strip()}")
            if _answers_ping(self.port):
                return
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"redis-server did not answer PING on port {self.port} in {START_TIMEOUT_S} s")


def _answers_ping(port: int) -> bool:
    """A raw RESP PING, so that this helper does not depend on the client under test."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False

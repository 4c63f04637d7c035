"""`treespec health`, the check compose.yaml's services run: exit 0 while a real drafter server
reports SERVING over gRPC's standard health check, 1 once it is gone; over HTTP, 0 while the real
gateway's /health answers 200, 1 while it answers 503 (no verifier behind it) and when nothing listens."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services.gateway_stack import start_gateway
from treespec.shared.launcher.ports import free_port

COMMAND = [sys.executable, "-m", "treespec.shared.cli.main"]


def health(target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "health", target, "--timeout", "2"], capture_output=True, text=True)


@pytest.fixture()
def drafter() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    argv = ["drafter", "--kind", "ngram", "--vocab-size", "1000", "--port", str(port)]
    process = subprocess.Popen([*COMMAND, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield process, port
    process.kill()
    process.wait()


def test_a_grpc_service_is_healthy_while_it_serves(drafter: tuple[subprocess.Popen[bytes], int]) -> None:
    process, port = drafter
    target = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while (result := health(target)).returncode != 0 and time.monotonic() < deadline:
        assert result.returncode == 1 and process.poll() is None  # starting: not serving yet
        time.sleep(0.2)
    assert result.returncode == 0 and result.stdout.strip() == f"{target}: serving"
    process.kill()
    process.wait()
    gone = health(target)
    assert gone.returncode == 1 and gone.stderr.strip() == f"{target}: not serving"


def test_the_stack_is_healthy_while_it_serves(url: str, verifier: int) -> None:
    for target in (f"{url}/health", f"127.0.0.1:{verifier}"):
        result = health(target)
        assert result.returncode == 0 and result.stdout.strip() == f"{target}: serving"


def test_a_gateway_without_a_verifier_is_not_healthy(model_path: Path, tmp_path: Path) -> None:
    port = free_port()
    gateway = start_gateway(model_path, free_port(), port, tmp_path)  # nothing listens there: 503
    target = f"http://127.0.0.1:{port}/health"
    try:
        result = health(target)
        assert result.returncode == 1 and result.stderr.strip() == f"{target}: not serving"
    finally:
        gateway.stop()
    assert health(target).returncode == 1  # nothing listens

"""`treespec verifier` and `treespec gateway` as child processes on loopback ports, for gateway tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openai.types.chat import ChatCompletionMessageParam

from treespec.shared.launcher.health import grpc_serving, http_ok

KEY = "sk-treespec-test"  # the gateway's API key in the gateway tests
MODEL = "SmolLM2-135M-Instruct"
HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]
CHAT = "/v1/chat/completions"
COUNTING = "1, 2, 3, 4,"  # a prompt whose greedy completion is known to go on counting


def chat_body(**fields: Any) -> dict[str, Any]:
    """A short chat request's JSON body, with `fields` added or replaced."""
    return {"model": MODEL, "messages": HI, "max_tokens": 2, **fields}


def completion_body(**fields: Any) -> dict[str, Any]:
    """A short completion request's JSON body, with `fields` added or replaced."""
    return {"model": MODEL, "prompt": "hi", "max_tokens": 2, **fields}


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_until(self, ready: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"{self.name} not ready after {timeout_s}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(name: str, args: list[str], log: Path) -> Service:
    command = [sys.executable, "-m", "treespec.shared.cli.main", *args]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    return Service(name, process, log)


def start_verifier(model_path: Path, port: int, log_dir: Path, algorithm: str = "RANDOM") -> Service:
    args = ["verifier", "--model-path", str(model_path), "--port", str(port), "--max-total-tokens", "8192"]
    args += ["--profile-dir", str(log_dir / "profiles")]  # /start_profile's traces (test_gateway_profile.py)
    service = start("verifier", [*args, "--speculative-algorithm", algorithm], log_dir / "verifier.log")
    service.wait_until(lambda: grpc_serving(f"127.0.0.1:{port}"), timeout_s=180)
    return service


def start_gateway(
    model_path: Path,
    verifier_port: int,
    port: int,
    log_dir: Path,
    api_keys: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
) -> Service:
    args = ["gateway", "--model-path", str(model_path), "--verifier-address", f"127.0.0.1:{verifier_port}"]
    args += ["--port", str(port), *flags]
    for key in api_keys:
        args += ["--api-key", key]
    service = start(f"gateway:{port}", args, log_dir / f"gateway-{port}.log")
    # /health answers 200 or 503 as soon as the gateway listens; 503 is enough for a dead verifier.
    service.wait_until(lambda: "gateway listening on" in service.log.read_text(errors="replace"), 60)
    return service


def healthy(url: str) -> bool:
    return http_ok(f"{url}/health")

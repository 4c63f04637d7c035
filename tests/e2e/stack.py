"""The real service stack (drafter, verifier, gateway) as separate processes on loopback ports."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from treespec.shared.cli.serve import ServeConfig, services
from treespec.shared.launcher.process import ServiceProcess
from treespec.shared.launcher.supervisor import Supervisor


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Stack:
    config: ServeConfig
    supervisor: Supervisor

    @property
    def base_url(self) -> str:
        return f"{self.config.url}/v1"

    @property
    def verifier_address(self) -> str:
        return f"127.0.0.1:{self.config.verifier_port}"

    def service(self, name: str) -> ServiceProcess:
        return next(s for s in self.supervisor.services if s.name == name)

    def stop(self) -> None:
        self.supervisor.stop_all()


def start_stack(model_path: Path, algorithm: str = "RANDOM", api_keys: tuple[str, ...] = ()) -> Stack:
    config = ServeConfig(
        model_path=model_path,
        host="127.0.0.1",
        port=free_port(),
        verifier_port=free_port(),
        drafter_port=free_port(),
        algorithm=algorithm,
        num_steps=5,
        eagle_topk=4,
        num_draft_tokens=8,
        draft_deadline_ms=200,
        api_keys=api_keys,
        served_model_name=None,
        verifier_metrics_port=None,
    )
    supervisor = Supervisor(services(config), ready_timeout_s=180)
    supervisor.start_all()
    return Stack(config, supervisor)

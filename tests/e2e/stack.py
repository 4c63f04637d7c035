"""The real service stack (drafter, verifier, gateway) as separate processes on loopback ports."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from treespec.shared.cli.serve import ServeConfig, services
from treespec.shared.launcher.process import ServiceProcess
from treespec.shared.launcher.supervisor import Supervisor


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
    config = ServeConfig.on_free_ports(model_path, algorithm, draft_deadline_ms=200, api_keys=api_keys)
    supervisor = Supervisor(services(config), ready_timeout_s=180)
    supervisor.start_all()
    return Stack(config, supervisor)

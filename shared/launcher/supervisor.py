"""Start services in order, wait until each is ready, and stop them all when one dies or on a signal."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

from treespec.shared.launcher.process import ServiceProcess

log = logging.getLogger(__name__)


class ServiceFailedError(RuntimeError):
    pass


@dataclass
class Supervisor:
    services: Sequence[ServiceProcess]
    ready_timeout_s: float = 600.0
    poll_s: float = 0.2

    def start_all(self) -> None:
        """Start each service and wait for it before the next (the gateway needs the verifier...)."""
        for service in self.services:
            service.start()
            self._wait_ready(service)

    def run_until_stopped(self) -> int:
        """Block until SIGINT/SIGTERM (exit 0) or until a service exits (exit 1); stop everything."""
        stop = {"signal": False}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop["signal"] = True

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stop["signal"]:
                dead = next((s for s in self.services if s.exit_code is not None), None)
                if dead is not None:
                    log.error("%s exited with code %s; stopping the others", dead.name, dead.exit_code)
                    return 1
                time.sleep(self.poll_s)
            return 0
        finally:
            self.stop_all()
            for s, handler in previous.items():
                signal.signal(s, handler)

    def stop_all(self) -> None:
        for service in reversed(self.services):
            service.stop()

    def _wait_ready(self, service: ServiceProcess) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if service.exit_code is not None:
                self.stop_all()
                raise ServiceFailedError(
                    f"{service.name} exited with code {service.exit_code} while starting"
                )
            if service.ready():
                log.info("%s is ready", service.name)
                return
            time.sleep(self.poll_s)
        self.stop_all()
        raise ServiceFailedError(f"{service.name} was not ready after {self.ready_timeout_s:.0f} s")

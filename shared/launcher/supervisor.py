"""Start services in order, wait until each is ready, and stop them all when an essential one dies or
on a signal. A service that is not essential (a drafter: without it the verifier decodes plainly) is
restarted when it dies, after a delay that doubles while it keeps dying young."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType

from treespec.shared.launcher.process import ServiceProcess

log = logging.getLogger(__name__)


class ServiceFailedError(RuntimeError):
    pass


@dataclass
class RestartPolicy:
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    healthy_after_s: float = 60.0  # a run this long resets the delay


@dataclass
class _Restarts:
    """When a non-essential service started, how often it died young, when it starts again."""

    started_at: float
    failures: int = 0
    due_at: float | None = None


@dataclass
class Supervisor:
    services: Sequence[ServiceProcess]
    ready_timeout_s: float = 600.0
    poll_s: float = 0.2
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    _restarts: dict[str, _Restarts] = field(default_factory=dict)

    def start_all(self) -> None:
        """Start each service and wait for it before the next (the gateway needs the verifier...)."""
        for service in self.services:
            service.start()
            self._wait_ready(service)
            self._restarts[service.name] = _Restarts(time.monotonic())

    def run_until_stopped(self) -> int:
        """Block until SIGINT/SIGTERM (exit 0) or until an essential service exits (exit 1); stop
        everything. Non-essential services that exit meanwhile are restarted."""
        stop = {"signal": False}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop["signal"] = True

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stop["signal"]:
                dead = next((s for s in self.services if s.essential and s.exit_code is not None), None)
                if dead is not None:
                    log.error("%s exited with code %s; stopping the others", dead.name, dead.exit_code)
                    return 1
                self.restart_dead()
                time.sleep(self.poll_s)
            return 0
        finally:
            self.stop_all()
            for s, handler in previous.items():
                signal.signal(s, handler)

    def restart_dead(self) -> None:
        """One pass over the non-essential services: schedule a restart for each that died, and start
        those whose delay has passed (without waiting for them: the others serve meanwhile)."""
        now = time.monotonic()
        for service in self.services:
            if service.essential or service.exit_code is None:
                continue
            record = self._restarts.setdefault(service.name, _Restarts(now))
            if record.due_at is None:
                young = now - record.started_at < self.restart.healthy_after_s
                record.failures = record.failures + 1 if young else 1
                delay = min(self.restart.max_delay_s, self.restart.first_delay_s * 2 ** (record.failures - 1))
                record.due_at = now + delay
                log.warning(
                    "%s exited with code %s; restarting it in %.0f s (serving goes on without it)",
                    service.name,
                    service.exit_code,
                    delay,
                )
            if now >= record.due_at:
                service.start()
                record.started_at, record.due_at = now, None
                log.info("%s restarted", service.name)

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

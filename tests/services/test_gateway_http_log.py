"""The HTTP server's log (vLLM's --uvicorn-log-level and --disable-uvicorn-access-log) through the real
gateway: a line per request by default, none with the access log off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.services.gateway_stack import KEY, Service, chat_body, start_gateway
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quiet(model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    flags = ("--disable-uvicorn-access-log", "--uvicorn-log-level", "warning")
    service = start_gateway(
        model_path, verifier, free_port(), tmp_path_factory.mktemp("quiet"), (KEY,), flags
    )
    yield service
    service.stop()


def _access_lines(service: Service) -> list[str]:
    return [line for line in service.log.read_text(errors="replace").splitlines() if '"POST /v1/' in line]


def test_a_request_is_logged_unless_the_access_log_is_off(
    quiet: Service, gateway: tuple[str, Service], http: httpx.Client
) -> None:
    _, loud = gateway
    before = len(_access_lines(loud))
    assert http.post("/v1/chat/completions", json=chat_body()).status_code == 200
    assert len(_access_lines(loud)) == before + 1
    port = quiet.name.split(":")[1]
    answer = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json=chat_body(),
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert answer.status_code == 200 and _access_lines(quiet) == []
    assert "Uvicorn running" not in quiet.log.read_text()  # uvicorn's info lines are below warning

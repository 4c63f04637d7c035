"""The gateway's logs through the real gateway: the HTTP server's (vLLM's --uvicorn-log-level and
--disable-uvicorn-access-log: a line per request by default, none with the access log off) and the
generation requests' (vLLM's --enable-log-requests and --max-log-len)."""

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
    flags: tuple[str, ...] = ("--disable-uvicorn-access-log", "--uvicorn-log-level", "warning")
    flags = (*flags, "--enable-log-requests", "--max-log-len", "5")
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


def _request_lines(service: Service) -> list[str]:
    return [
        line for line in service.log.read_text(errors="replace").splitlines() if "gateway.requests:" in line
    ]


def test_generation_requests_are_logged_when_asked(quiet: Service, gateway: tuple[str, Service]) -> None:
    """A line as a request starts (its id, prompt tokens, sampling, the prompt cut to --max-log-len)
    and one as it ends (its tokens, finish and acceptance length); none by default."""
    port = quiet.name.split(":")[1]
    auth = {"Authorization": f"Bearer {KEY}", "X-Request-Id": "logged-1"}
    body = chat_body(temperature=0, max_tokens=3)
    answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, headers=auth)
    assert answer.status_code == 200
    start, end = [line for line in _request_lines(quiet) if "chatcmpl-logged-1" in line]
    assert "(chat): 1 prompt(s)" in start and "max_tokens 3" in start and "'temperature': 0.0" in start
    prompt_ids = start.split("prompt_token_ids ")[1]
    assert len(prompt_ids.strip("[]").split(",")) == 5  # cut to --max-log-len
    tokens = answer.json()["usage"]["completion_tokens"]
    assert "finished in" in end and f"{tokens} completion tokens" in end and "acceptance length" in end
    _, loud = gateway
    assert _request_lines(loud) == []

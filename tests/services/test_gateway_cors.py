"""Cross-origin calls from browsers against the real gateway: any origin by default (as vLLM and
SGLang), answered before the API key is asked for and on refusals too; vLLM's flags narrow it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.services.gateway_stack import KEY, chat_body, start, start_gateway
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow

PAGE = "https://chat.example"
PREFLIGHT = {
    "Origin": PAGE,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}


@pytest.fixture(scope="module")
def narrowed(model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("cors")
    port = free_port()
    flags = (
        "--allowed-origins",
        f'["{PAGE}"]',
        "--allowed-methods",
        '["GET", "POST"]',
        "--allow-credentials",
    )
    service = start_gateway(model_path, verifier, port, folder, (KEY,), flags)
    yield f"http://127.0.0.1:{port}"
    service.stop()


def test_any_origin_by_default(url: str) -> None:
    """A preflight needs no API key; the answers, a 401 and a stream included, name the origin allowed."""
    preflight = httpx.options(f"{url}/v1/chat/completions", headers=PREFLIGHT)
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    refused = httpx.post(f"{url}/v1/chat/completions", headers={"Origin": PAGE}, json=chat_body())
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == "*"
    assert refused.json()["error"]["code"] == "invalid_api_key"
    headers = {"Origin": PAGE, "Authorization": f"Bearer {KEY}"}
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", headers=headers, json=chat_body(stream=True)
    ) as s:
        assert s.status_code == 200 and s.headers["access-control-allow-origin"] == "*"
        assert "data: [DONE]" in s.read().decode()
    assert "access-control-allow-origin" not in httpx.get(f"{url}/health").headers  # no Origin: no CORS


def test_the_flags_narrow_it(narrowed: str) -> None:
    allowed = httpx.options(f"{narrowed}/v1/models", headers=PREFLIGHT)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == PAGE
    assert allowed.headers["access-control-allow-credentials"] == "true"
    other = httpx.options(f"{narrowed}/v1/models", headers={**PREFLIGHT, "Origin": "https://other.example"})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    deleting = httpx.options(
        f"{narrowed}/v1/models", headers={**PREFLIGHT, "Access-Control-Request-Method": "DELETE"}
    )
    assert deleting.status_code == 400
    listed = httpx.get(
        f"{narrowed}/v1/models", headers={"Origin": "https://other.example", "Authorization": f"Bearer {KEY}"}
    )
    assert listed.status_code == 200 and "access-control-allow-origin" not in listed.headers


def test_a_list_that_is_not_one_stops_the_gateway(model_path: Path, tmp_path: Path) -> None:
    args = ["gateway", "--model-path", str(model_path), "--verifier-address", "127.0.0.1:1"]
    service = start("gateway", [*args, "--allowed-origins", '{"a": 1}'], tmp_path / "log")
    assert service.process.wait(timeout=60) == 2
    assert "--allowed-origins: not a JSON list of strings" in service.log_tail()

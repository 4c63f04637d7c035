"""Requests named by the X-Request-Id header, as vLLM names them, through the real gateway: the
response's id holds the tag unless the body's request_id names it; with --enable-request-id-headers
every answer carries the header back (the request's own, or a new id)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.services.gateway_stack import KEY, chat_body, completion_body, start_gateway
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow

AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def tagging(
    model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    port = free_port()
    folder = tmp_path_factory.mktemp("request-ids")
    service = start_gateway(model_path, verifier, port, folder, (KEY,), ("--enable-request-id-headers",))
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=AUTH, timeout=120) as client:
        yield client
    service.stop()


def test_the_header_names_the_response_and_comes_back(tagging: httpx.Client) -> None:
    tagged = tagging.post("/v1/chat/completions", json=chat_body(), headers={"X-Request-Id": "trace-123"})
    assert tagged.json()["id"] == "chatcmpl-trace-123" and tagged.headers["x-request-id"] == "trace-123"
    completion = tagging.post("/v1/completions", json=completion_body(), headers={"X-Request-Id": "t-9"})
    assert completion.json()["id"] == "cmpl-t-9"
    with tagging.stream(
        "POST", "/v1/chat/completions", json=chat_body(stream=True), headers={"X-Request-Id": "s-1"}
    ) as stream:
        assert stream.headers["x-request-id"] == "s-1"
        ids = set(re.findall(r'"id":"([^"]+)"', stream.read().decode()))
    assert ids == {"chatcmpl-s-1"}
    mine = tagging.post(
        "/v1/chat/completions", json=chat_body(request_id="mine"), headers={"X-Request-Id": "x"}
    )
    assert mine.json()["id"] == "chatcmpl-mine"  # the body's own wins


def test_without_a_usable_header_a_new_id_comes_back(tagging: httpx.Client, http: httpx.Client) -> None:
    plain = tagging.post("/v1/chat/completions", json=chat_body())
    assert re.fullmatch(r"[0-9a-f]{32}", plain.headers["x-request-id"])
    assert plain.json()["id"] != f"chatcmpl-{plain.headers['x-request-id']}"
    too_long = tagging.post("/v1/chat/completions", json=chat_body(), headers={"X-Request-Id": "a" * 2000})
    assert too_long.status_code == 200 and "a" * 2000 not in too_long.json()["id"]
    assert re.fullmatch(r"[0-9a-f]{32}", too_long.headers["x-request-id"])
    assert tagging.get("/health").headers["x-request-id"]  # every answer, errors and health too
    # The package's gateway, without the flag: the header still names the response, none comes back.
    named = http.post("/v1/chat/completions", json=chat_body(), headers={"X-Request-Id": "quiet"})
    assert named.json()["id"] == "chatcmpl-quiet" and "x-request-id" not in named.headers

"""vLLM's /invocations (SageMaker's route) through the real gateway and verifier: a body with
`messages` is answered as /v1/chat/completions answers it, one with `prompt` as /v1/completions,
streamed too; anything else, and a body that is no JSON or has a bad field, is a 400."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.services.gateway_stack import chat_body, completion_body

pytestmark = pytest.mark.slow


def _without_ids(reply: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in reply.items() if k not in ("id", "created")}


def test_an_invocation_is_a_chat_completion_or_a_completion(http: httpx.Client) -> None:
    for path, body in (
        ("/v1/chat/completions", chat_body(temperature=0)),
        ("/v1/completions", completion_body(temperature=0)),
    ):
        direct = http.post(path, json=body)
        invoked = http.post("/invocations", json=body)
        assert invoked.status_code == 200, invoked.text
        assert invoked.json()["object"] == direct.json()["object"]
        assert _without_ids(invoked.json())["choices"] == _without_ids(direct.json())["choices"]


def test_an_invocation_streams(http: httpx.Client) -> None:
    with http.stream("POST", "/invocations", json=chat_body(stream=True, max_tokens=3)) as response:
        lines = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    assert json.loads(lines[0])["object"] == "chat.completion.chunk"


def test_an_invocation_that_is_neither_or_is_malformed_is_a_400(http: httpx.Client) -> None:
    neither = http.post("/invocations", json={"input": "hi"})
    assert neither.status_code == 400 and "'messages'" in neither.json()["error"]["message"]
    broken = http.post("/invocations", content=b"{not json", headers={"Content-Type": "application/json"})
    assert broken.status_code == 400 and "JSON" in broken.json()["error"]["message"]
    bad = http.post("/invocations", json=completion_body(max_tokens=-1))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_tokens"

"""SGLang's /flush_cache and vLLM's /reset_prefix_cache against the real gateway and verifier: a
flushed prompt is computed again (no cached tokens), and a flush while a request runs is a 400."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.services.gateway_stack import MODEL

pytestmark = pytest.mark.slow

# A prompt of several full KV blocks, its own to this test.
PROMPT = "Flushing test. " + " ".join(f"item {i}," for i in range(40))


def _cached_tokens(http: httpx.Client) -> int:
    reply = http.post(
        "/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 2, "temperature": 0}
    )
    assert reply.status_code == 200, reply.text
    return int(reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


def _flush(http: httpx.Client, method: str, path: str) -> httpx.Response:
    deadline = time.monotonic() + 30
    while True:  # the previous test's requests may still be finishing at the verifier
        response = http.request(method, path)
        if response.status_code != 400 or time.monotonic() > deadline:
            return response
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/flush_cache"), ("GET", "/flush_cache"), ("POST", "/reset_prefix_cache")]
)
def test_a_flushed_prompt_is_computed_again(http: httpx.Client, method: str, path: str) -> None:
    _cached_tokens(http)
    assert _cached_tokens(http) > 0  # the second time, from the cache
    flushed = _flush(http, method, path)
    assert flushed.status_code == 200, flushed.text
    assert flushed.json()["freed_blocks"] > 0
    assert _cached_tokens(http) == 0


def test_a_flush_while_a_request_runs_is_a_400(http: httpx.Client, url: str) -> None:
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        # Long enough that it cannot end before the flush arrives on a fast machine (400 tokens once
        # did: a 200 flush after a first token); closing the stream below ends it.
        "max_tokens": 4000,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    with http.stream("POST", "/v1/completions", json=body) as stream:
        first = next(stream.iter_lines())  # it runs: its first token is out
        assert stream.status_code == 200 and first.startswith("data: {"), first
        assert "error" not in json.loads(first.removeprefix("data: ")), first
        busy = http.post("/flush_cache")
    assert busy.status_code == 400, (busy.text, first)
    assert busy.json()["error"]["code"] == "engine_busy"
    assert _flush(http, "POST", "/flush_cache").status_code == 200  # once it is gone
    assert httpx.post(f"{url}/flush_cache").status_code == 401  # behind the API key

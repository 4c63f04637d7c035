"""Bad input at the gateway's HTTP edge: a 4xx with OpenAI's error shape, never a 500, and the server
serves on (the stack of conftest.py: a real verifier and gateway as child processes)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.services.gateway_stack import CHAT, HI, KEY, MODEL, Service, chat_body, completion_body

pytestmark = pytest.mark.slow


def _schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def _deep(levels: int) -> bytes:
    return b'{"model": "m", "messages": ' + b"[" * levels + b"]" * levels + b"}"


DONE_CASES: dict[str, tuple[str, dict[str, Any], int]] = {
    # name: (path, httpx keyword arguments, expected status)
    "huge max_tokens": (CHAT, {"json": chat_body(max_tokens=10**30)}, 400),
    "negative max_tokens": (CHAT, {"json": chat_body(max_tokens=-5)}, 400),
    "max_tokens as a string": (CHAT, {"json": chat_body(max_tokens="5")}, 400),
    "zero max_completion_tokens": (CHAT, {"json": chat_body(max_completion_tokens=0)}, 400),
    "unknown field": (CHAT, {"json": chat_body(frobnicate=True)}, 400),
    "missing messages": (CHAT, {"json": {"model": MODEL}}, 400),
    "empty messages": (CHAT, {"json": chat_body(messages=[])}, 400),
    "bad role": (CHAT, {"json": chat_body(messages=[{"role": "wizard", "content": "x"}])}, 400),
    "message without content": (CHAT, {"json": chat_body(messages=[{"role": "user"}])}, 400),
    "content of the wrong type": (CHAT, {"json": chat_body(messages=[{"role": "user", "content": 42}])}, 400),
    "image content part": (
        CHAT,
        {
            "json": chat_body(
                messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
            )
        },
        400,
    ),
    "n=0": (CHAT, {"json": chat_body(n=0)}, 400),
    "n=129": (CHAT, {"json": chat_body(n=129)}, 400),
    "temperature=-1": (CHAT, {"json": chat_body(temperature=-1)}, 400),
    "temperature as text": (CHAT, {"json": chat_body(temperature="hot")}, 400),
    "top_p=2": (CHAT, {"json": chat_body(top_p=2)}, 400),
    "65 stop strings": (CHAT, {"json": chat_body(stop=[f"s{i}" for i in range(65)])}, 400),
    "stop as a number": (CHAT, {"json": chat_body(stop=3)}, 400),
    "unknown model": (CHAT, {"json": chat_body(model="gpt-5")}, 404),
    "missing model": (CHAT, {"json": {"messages": HI}}, 400),
    "top_logprobs without logprobs": (CHAT, {"json": chat_body(top_logprobs=2)}, 400),
    "top_logprobs=21": (CHAT, {"json": chat_body(logprobs=True, top_logprobs=21)}, 400),
    "tools": (CHAT, {"json": chat_body(tools=[{"type": "function", "function": {"name": "f"}}])}, 400),
    "json_schema without its schema": (
        CHAT,
        {"json": chat_body(response_format={"type": "json_schema"})},
        400,
    ),
    "a schema that does not compile": (
        CHAT,
        {"json": chat_body(response_format=_schema_format({"type": "nonsense"}))},
        400,
    ),
    "a regex that does not compile": (CHAT, {"json": chat_body(guided_regex="[a-")}, 400),
    "two structured outputs": (
        CHAT,
        {"json": chat_body(response_format={"type": "json_object"}, guided_choice=["a"])},
        400,
    ),
    "structured outputs beside guided decoding": (
        CHAT,
        {"json": chat_body(structured_outputs={"regex": "a+"}, guided_choice=["a"])},
        400,
    ),
    "structured outputs of two kinds": (
        CHAT,
        {"json": chat_body(structured_outputs={"regex": "a+", "choice": ["a"]})},
        400,
    ),
    "structured outputs of no kind": (CHAT, {"json": chat_body(structured_outputs={})}, 400),
    "a structured outputs backend switch": (
        CHAT,
        {"json": chat_body(structured_outputs={"regex": "a+", "disable_any_whitespace": True})},
        400,
    ),
    "presence penalty beyond 2": (CHAT, {"json": chat_body(presence_penalty=3.0)}, 400),
    "repetition penalty 0": (CHAT, {"json": chat_body(repetition_penalty=0)}, 400),
    "logit bias on a token beyond the vocabulary": (CHAT, {"json": chat_body(logit_bias={"999999": 1})}, 400),
    "logit bias beyond 100": (CHAT, {"json": chat_body(logit_bias={"5": 101})}, 400),
    "min_tokens beyond max_tokens": (CHAT, {"json": chat_body(min_tokens=5, max_tokens=2)}, 400),
    "min_tokens beyond a completion's default max_tokens": (
        "/v1/completions",
        {"json": {"model": MODEL, "prompt": "hi", "min_tokens": 17}},
        400,
    ),
    "stream_options without stream": (CHAT, {"json": chat_body(stream_options={"include_usage": True})}, 400),
    "speculation num_steps=0": (CHAT, {"json": chat_body(speculation={"num_steps": 0})}, 400),
    "speculation unknown key": (CHAT, {"json": chat_body(speculation={"depth": 3})}, 400),
    "seed beyond int64": (CHAT, {"json": chat_body(seed=2**64)}, 400),
    "negative stop token id": (CHAT, {"json": chat_body(stop_token_ids=[-1])}, 400),
    "NaN temperature": (
        CHAT,
        {
            "content": json.dumps(chat_body(temperature=float("nan"))),
            "headers": {"content-type": "application/json"},
        },
        400,
    ),
    "not JSON": (CHAT, {"content": b"hello there", "headers": {"content-type": "application/json"}}, 400),
    "JSON array body": (CHAT, {"content": b"[1, 2]", "headers": {"content-type": "application/json"}}, 400),
    "JSON null body": (CHAT, {"content": b"null", "headers": {"content-type": "application/json"}}, 400),
    "invalid UTF-8": (
        CHAT,
        {
            "content": b'{"model": "\xff\xfe", "messages": []}',
            "headers": {"content-type": "application/json"},
        },
        400,
    ),
    "empty body": (CHAT, {"content": b"", "headers": {"content-type": "application/json"}}, 400),
    "deeply nested JSON": (
        CHAT,
        {"content": _deep(100_000), "headers": {"content-type": "application/json"}},
        400,
    ),
    "form body": (CHAT, {"data": {"model": MODEL}}, 415),
    "text/plain": (CHAT, {"content": b"{}", "headers": {"content-type": "text/plain"}}, 415),
    "oversized body": (CHAT, {"json": chat_body(user="x" * (2 << 20))}, 413),
    "oversized chunked body": (
        CHAT,
        {
            "content": iter([b'{"model": "', *([b"a" * 65536] * 40), b'"}']),
            "headers": {"content-type": "application/json"},
        },
        413,
    ),
    "missing API key": (CHAT, {"json": chat_body(), "headers": {"Authorization": ""}}, 401),
    "wrong API key": (CHAT, {"json": chat_body(), "headers": {"Authorization": "Bearer sk-wrong"}}, 401),
    "basic auth": (CHAT, {"json": chat_body(), "headers": {"Authorization": f"Basic {KEY}"}}, 401),
    "prompt beyond the context": ("/v1/completions", {"json": completion_body(prompt=[1] * 9000)}, 400),
    "max_tokens beyond the context's room": (CHAT, {"json": chat_body(max_tokens=8192)}, 400),
    "max_tokens beyond a long prompt's room": (
        "/v1/completions",
        {"json": completion_body(prompt=[1] * 8000, max_tokens=200)},
        400,
    ),
    "token id beyond the vocabulary": ("/v1/completions", {"json": completion_body(prompt=[10**6])}, 400),
    "negative token id": ("/v1/completions", {"json": completion_body(prompt=[-1])}, 400),
    "empty prompt": ("/v1/completions", {"json": completion_body(prompt="")}, 400),
    "empty prompt list": ("/v1/completions", {"json": completion_body(prompt=[])}, 400),
    "mixed prompt list": ("/v1/completions", {"json": completion_body(prompt=[1, "a"])}, 400),
    "suffix": ("/v1/completions", {"json": completion_body(suffix="end")}, 400),
    "logprobs=21": ("/v1/completions", {"json": completion_body(logprobs=21)}, 400),
    "messages on completions": ("/v1/completions", {"json": completion_body(messages=HI)}, 400),
    "unknown URL": ("/v1/engines", {"json": {}}, 404),
}


@pytest.mark.parametrize("name", list(DONE_CASES))
def test_bad_requests_get_openai_errors(http: httpx.Client, name: str) -> None:
    path, kwargs, status = DONE_CASES[name]
    response = http.post(path, **kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]
    if name in ("prompt beyond the context", "max_tokens beyond the context's room"):
        assert error["code"] == "context_length_exceeded"
    if name == "unknown model":
        assert error["code"] == "model_not_found"
    if name in NAMED_PARAMS:
        assert error["param"] == NAMED_PARAMS[name]


# Cases whose error names the field at fault (checked beside the others in DONE_CASES).
NAMED_PARAMS = {
    "logit bias on a token beyond the vocabulary": "logit_bias",
    "min_tokens beyond max_tokens": "min_tokens",
    "min_tokens beyond a completion's default max_tokens": "min_tokens",
    "max_tokens beyond the context's room": "max_tokens",
    "max_tokens beyond a long prompt's room": "max_tokens",
}


def _with_escapes(body: dict[str, Any]) -> dict[str, Any]:
    """httpx keyword arguments sending `body` as JSON with its lone surrogates escaped ("\\ud800")."""
    return {"content": json.dumps(body).encode(), "headers": {"content-type": "application/json"}}


SURROGATE_CASES: dict[str, tuple[str, dict[str, Any], int, str | None]] = {
    # name: (path, body, expected status, expected param)
    "in a message": (
        CHAT,
        chat_body(messages=[{"role": "user", "content": "bad \ud800 surrogate"}]),
        400,
        "messages.0.content",
    ),
    "in a prompt": ("/v1/completions", completion_body(prompt="bad \ud83d"), 400, "prompt"),
    "in a stop string": (CHAT, chat_body(stop=["\udfff"]), 400, "stop.0"),
    "in the model name": (CHAT, chat_body(model="gpt\ud800"), 400, "model"),
    "quoted by the error": (  # the refusal names the part's type, which must not break the response
        CHAT,
        chat_body(messages=[{"role": "user", "content": [{"type": "x\ud800", "text": "hi"}]}]),
        400,
        "messages.0.content.0.type",
    ),
    "in a field name": (CHAT, {**chat_body(), "x\ud800": 1}, 400, None),
}


@pytest.mark.parametrize("name", list(SURROGATE_CASES))
def test_lone_surrogates_get_openai_errors(http: httpx.Client, name: str) -> None:
    path, body, status, param = SURROGATE_CASES[name]
    response = http.post(path, **_with_escapes(body))
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param


def test_wrong_method_and_keyless_routes(url: str, http: httpx.Client) -> None:
    assert http.put(CHAT).status_code == 405  # GET lists the stored chat completions
    assert httpx.get(f"{url}/v1/models").status_code == 401
    assert httpx.get(f"{url}/health").status_code == 200  # no key needed


def test_still_serving_after_the_bad_requests(client: openai.OpenAI, http: httpx.Client) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=3, temperature=0)
    assert reply.choices[0].message.content
    assert 'status="500"' not in http.get("/metrics").text


def test_no_server_error_was_logged(gateway: tuple[str, Service]) -> None:
    log = gateway[1].log.read_text(errors="replace")
    assert "Traceback" not in log and "unexpected error" not in log

"""OpenAI's batch file format: each line a request or the reason it cannot be sent, each result
in the output's format, and the results written in their lines' order whatever order they end in."""

from __future__ import annotations

import io
import json

import pytest

from treespec.gateway.batch_file import BatchRequest, LineError, answered, parse_line, unsent
from treespec.gateway.batch_runner import OrderedWriter

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _line(**fields: object) -> str:
    return json.dumps(
        {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": CHAT, **fields}
    )


def test_a_good_line_is_a_request() -> None:
    assert parse_line(_line(), set()) == BatchRequest("a", "/v1/chat/completions", CHAT)
    completion = parse_line(_line(url="/v1/completions", method="post"), set())
    assert isinstance(completion, BatchRequest) and completion.url == "/v1/completions"


@pytest.mark.parametrize(
    ("text", "custom_id", "code"),
    [
        ("not json", None, "invalid_json_line"),
        ("[1, 2]", None, "invalid_json_line"),
        (json.dumps({"method": "POST"}), None, "missing_required_parameter"),
        (_line(method="GET"), "a", "invalid_method"),
        (_line(url="/v1/embeddings"), "a", "invalid_url"),
        (_line(body="text"), "a", "invalid_body"),
        (_line(body={**CHAT, "stream": True}), "a", "invalid_body"),
    ],
)
def test_a_line_that_cannot_be_sent_says_why(text: str, custom_id: str | None, code: str) -> None:
    error = parse_line(text, set())
    assert isinstance(error, LineError) and (error.custom_id, error.code) == (custom_id, code)
    assert error.message


def test_a_custom_id_is_used_once() -> None:
    seen: set[str] = set()
    assert isinstance(parse_line(_line(), seen), BatchRequest)
    again = parse_line(_line(), seen)
    assert isinstance(again, LineError) and again.code == "duplicate_custom_id"


def test_results_have_the_output_format() -> None:
    ok = answered("a", 200, {"id": "chatcmpl-1"}, "chatcmpl-1")
    assert ok["custom_id"] == "a" and ok["error"] is None and ok["id"].startswith("batch_req_")
    assert ok["response"] == {"status_code": 200, "request_id": "chatcmpl-1", "body": {"id": "chatcmpl-1"}}
    refused = answered("b", 400, {"error": {"message": "no"}})
    assert refused["response"]["request_id"].startswith("req_")
    failed = unsent(LineError("c", "invalid_url", "no such endpoint"))
    assert failed["response"] is None and failed["error"] == {
        "code": "invalid_url",
        "message": "no such endpoint",
    }


def test_results_are_written_in_their_lines_order() -> None:
    out = io.StringIO()
    writer = OrderedWriter(out)
    writer.add(2, {"n": "two"})
    writer.add(1, {"n": "one"})
    assert out.getvalue() == ""  # line 0 has not ended
    writer.add(0, {"n": "zero"})
    writer.add(3, {"n": "three"})
    assert [json.loads(line)["n"] for line in out.getvalue().splitlines()] == ["zero", "one", "two", "three"]

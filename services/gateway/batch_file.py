"""OpenAI's batch file format (the Batch API's, and vLLM's `run-batch`): each input line a request
`{"custom_id", "method": "POST", "url", "body"}`, each output line its result, in the same order:
`{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null}`, where the body
is the endpoint's answer (an OpenAI error object for a 4xx or 5xx). A line that cannot be sent (no
JSON, no custom_id, another method, an endpoint a batch cannot use, `stream`) gets `response: null`
and an `error` with a code and a message, as OpenAI's batch error files have them.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

BATCH_URLS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")


@dataclass(frozen=True)
class BatchRequest:
    custom_id: str
    url: str
    body: dict[str, Any]


@dataclass(frozen=True)
class LineError:
    """Why a line was not sent."""

    custom_id: str | None
    code: str
    message: str


def parse_line(text: str, seen: set[str]) -> BatchRequest | LineError:
    """One input line as a request to send, or why it cannot be sent (`seen`: the custom ids of the
    lines before, which this one's joins)."""
    try:
        line = json.loads(text)
    except ValueError as exc:
        return LineError(None, "invalid_json_line", f"The line is not JSON: {exc}.")
    if not isinstance(line, dict):
        return LineError(None, "invalid_json_line", "The line must be a JSON object.")
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return LineError(None, "missing_required_parameter", "The line needs a custom_id (a string).")
    if custom_id in seen:
        return LineError(
            custom_id, "duplicate_custom_id", f"custom_id '{custom_id}' is used by an earlier line."
        )
    seen.add(custom_id)
    return _request(custom_id, line)


def _request(custom_id: str, line: dict[str, Any]) -> BatchRequest | LineError:
    if str(line.get("method", "")).upper() != "POST":
        return LineError(custom_id, "invalid_method", "A batch request's method must be POST.")
    url = line.get("url")
    if url not in BATCH_URLS:
        supported = ", ".join(BATCH_URLS)
        return LineError(custom_id, "invalid_url", f"URL {url!r} cannot be used in a batch: use {supported}.")
    body = line.get("body")
    if not isinstance(body, dict):
        return LineError(custom_id, "invalid_body", "The line's body must be a JSON object.")
    if body.get("stream"):
        return LineError(custom_id, "invalid_body", "A batch request cannot stream (stream must be false).")
    return BatchRequest(custom_id, str(url), body)


def answered(custom_id: str, status_code: int, body: Any, request_id: str | None = None) -> dict[str, Any]:
    """The output line of a request the server answered (any status)."""
    response = {"status_code": status_code, "request_id": request_id or _id("req"), "body": body}
    return {"id": _id("batch_req"), "custom_id": custom_id, "response": response, "error": None}


def unsent(error: LineError) -> dict[str, Any]:
    """The output line of a line that was not sent, or whose request got no answer."""
    failure = {"code": error.code, "message": error.message}
    return {"id": _id("batch_req"), "custom_id": error.custom_id, "response": None, "error": failure}


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"

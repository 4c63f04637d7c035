"""OpenAI-style error bodies: always sendable, whatever of the request they quote."""

from __future__ import annotations

import json

from treespec.gateway.errors import APIError


def test_an_error_quoting_a_lone_surrogate_is_still_sent() -> None:
    error = APIError(404, "The model `gpt\ud800` does not exist.", code="model_not_found", param="x\udfff")
    body = json.loads(bytes(error.response().body))["error"]  # would raise UnicodeEncodeError unescaped
    assert body["message"] == "The model `gpt\\ud800` does not exist."
    assert (body["param"], body["code"]) == ("x\\udfff", "model_not_found")

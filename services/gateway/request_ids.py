"""Requests named by the `X-Request-Id` header, as vLLM names them: a proxy or a client that tags each
request (nginx's $request_id, Envoy's x-request-id) finds its tag in the response's id
(`chatcmpl-<tag>`, `cmpl-<tag>`), unless the body's own `request_id` names it. With
`--enable-request-id-headers` every answer carries the header back: the request's own, or a new id
(vLLM's flag)."""

from __future__ import annotations

import uuid
from typing import TypeVar

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from treespec.gateway.schema_types import MAX_HINT_CHARS
from treespec.gateway.schemas import SamplingFields

HEADER = "x-request-id"

Body = TypeVar("Body", bound=SamplingFields)


def named_by_header(body: Body, request: Request) -> Body:
    """`body`, its request_id taken from the header where it gives none (a header too long or not
    printable ASCII is left out, as a malformed tag should not fail the request)."""
    tag = request.headers.get(HEADER)
    if body.request_id is not None or not _usable(tag):
        return body
    return body.model_copy(update={"request_id": tag})


def _usable(tag: str | None) -> bool:
    return tag is not None and 0 < len(tag) <= MAX_HINT_CHARS and tag.isascii() and tag.isprintable()


class RequestIdHeader:
    """Answers carry X-Request-Id: the request's own, or a new one (an ASGI middleware: streams pass
    through untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(HEADER.encode())
        tag = given if given is not None and _usable(given.decode("latin-1")) else uuid.uuid4().hex.encode()

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER.encode()]
                message = {**message, "headers": [*headers, (HEADER.encode(), tag)]}
            await send(message)

        await self.app(scope, receive, tagged)

"""What every request must carry, checked before routing (so before the body is read): the API key
when keys are configured (401 otherwise), a declared body size within the limit (413), and a JSON
body on POST (415 otherwise); a file upload (POST /v1/files) is multipart/form-data under a limit of
its own. /health, /metrics, /version and the API's own docs stay open; every
other path (the /v1 API, SGLang's /generate and /flush_cache, /tokenize) is guarded, as SGLang
guards them."""

from __future__ import annotations

import email.message
import secrets
from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from treespec.gateway.errors import APIError

OPEN_PATHS = frozenset(
    {
        "/health",
        "/health_generate",
        "/ping",
        "/metrics",
        "/version",
        "/load",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
        "/openapi.json",
    }
)


UPLOAD_PATH = "/v1/files"


class RequestGuard:
    def __init__(
        self, app: ASGIApp, api_keys: Sequence[str], max_body_bytes: int, max_upload_bytes: int | None = None
    ) -> None:
        self.app = app
        self.api_keys = tuple(key.encode() for key in api_keys)
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes if max_upload_bytes is not None else max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            error = self._refusal(scope)
            if error is not None:
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> APIError | None:
        headers = Headers(scope=scope)
        if self.api_keys and not self._authorized(headers.get("authorization", "")):
            return APIError(
                401,
                "Incorrect or missing API key. Pass it as 'Authorization: Bearer <key>'.",
                code="invalid_api_key",
            )
        upload = scope["method"] == "POST" and scope["path"] == UPLOAD_PATH
        limit = self.max_upload_bytes if upload else self.max_body_bytes
        if _declared_length(headers) > limit:
            # A body without a length (chunked) is counted as it arrives, by FastAPI's own limit.
            message = f"The request body is larger than {limit} bytes."
            return APIError(413, message, code="request_too_large")
        content_type = headers.get("content-type")
        if upload:
            if content_type is None or not content_type.lower().startswith("multipart/form-data"):
                return APIError(
                    415,
                    f"A file upload must be multipart/form-data (got '{content_type}').",
                    code="unsupported_media_type",
                )
        elif scope["method"] == "POST" and content_type is not None and not _is_json(content_type):
            return APIError(
                415,
                f"Content-Type must be application/json (got '{content_type}').",
                code="unsupported_media_type",
            )
        return None

    def _authorized(self, authorization: str) -> bool:
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return False
        given = key.strip().encode()
        # compare_digest against every key: the time taken tells nothing about which key matched
        return sum(secrets.compare_digest(given, expected) for expected in self.api_keys) > 0


def _declared_length(headers: Headers) -> int:
    try:
        return int(headers.get("content-length", "0"))
    except ValueError:
        return 0


def _is_json(content_type: str) -> bool:
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )

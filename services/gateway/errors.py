"""OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}`, for every failure.

Client mistakes are 4xx with type "invalid_request_error"; FastAPI's 422 validation errors become
400 (as OpenAI answers them). Unexpected failures are 500 with type "server_error".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

log = logging.getLogger(__name__)

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"

# pydantic error types -> OpenAI error codes (anything else: "invalid_value").
_CODES = {
    "extra_forbidden": "unknown_parameter",
    "missing": "missing_required_parameter",
    "json_invalid": "invalid_json",
    "unsupported_parameter": "unsupported_parameter",
}


_HTTP_CODES = {
    400: "invalid_body",
    404: "unknown_url",
    405: "method_not_allowed",
    413: "request_too_large",
}
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


class APIError(Exception):
    """An error with its HTTP status, raised anywhere in a request and answered as OpenAI does."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        error_type: str = INVALID_REQUEST,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = quotable(message)
        self.code = code
        self.param = None if param is None else quotable(param)
        self.error_type = error_type

    def body(self) -> dict[str, Any]:
        error = {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}
        return {"error": error}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def quotable(text: str) -> str:
    """`text` with lone surrogates written as `\\udXXX`, for an error message to quote: a request's
    JSON may escape one ("\\ud800"), and neither pydantic's error rendering nor a UTF-8 response
    body can hold it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(APIError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected_error)


def validation_error(errors: Sequence[Any]) -> APIError:
    """One of pydantic's errors, worded for a client (its field is the error's `param`)."""
    first = _most_telling(errors)
    loc = [str(part) for part in first.get("loc", ()) if part != "body" and not _is_union_tag(part)]
    param = ".".join(loc) or None
    kind = str(first.get("type", ""))
    message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        message = f"Unrecognized request argument supplied: {param}"
    elif kind == "json_invalid":
        message = "We could not parse the JSON body of your request: it is not valid JSON."
        param = None
    elif param is None and kind in ("model_attributes_type", "missing"):
        message = "The request body must be a JSON object."
    elif param is not None:
        message = f"Invalid value for '{param}': {message}"
    return APIError(400, message, code=_CODES.get(kind, "invalid_value"), param=param)


def _most_telling(errors: Sequence[Any]) -> dict[str, Any]:
    """The first error, unless a union's members all failed: then the member whose type matched
    (its constraint failed) says more than "Input should be a valid string"."""
    if not errors:
        return {"type": "value_error", "msg": "invalid request", "loc": ()}
    constraint = [e for e in errors if not str(e.get("type", "")).endswith("_type")]
    return dict(constraint[0] if constraint else errors[0])


def _is_union_tag(part: object) -> bool:
    """pydantic names each union member in an error's location: `str`, `list[str]`, ..."""
    return isinstance(part, str) and (part in _TYPE_TAGS or "[" in part)


async def _api_error(_: Request, exc: APIError) -> JSONResponse:
    return exc.response()


async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    return validation_error(exc.errors()).response()


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    status = exc.status_code
    if status == 404:
        message = f"Unknown request URL: {request.method} {request.url.path}."
    elif status == 413:
        message = "The request body is too large."
    elif status == 400:
        message = "We could not parse the body of your request (it must be UTF-8 encoded JSON)."
    else:
        message = str(exc.detail)
    error_type = INVALID_REQUEST if status < 500 else SERVER_ERROR
    error = APIError(status, message, code=_HTTP_CODES.get(status), error_type=error_type)
    return JSONResponse(error.body(), status_code=status, headers=exc.headers)


async def _unexpected_error(_: Request, exc: Exception) -> JSONResponse:
    log.error("unexpected error in a request", exc_info=exc)
    return APIError(
        500, "The server had an error processing your request.", error_type=SERVER_ERROR
    ).response()

"""Server-sent events as OpenAI streams them: `data: {json}\\n\\n` per chunk, then `data: [DONE]`."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import TypeVar

from fastapi.sse import EventSourceResponse, format_sse_event
from pydantic import BaseModel

from treespec.gateway.errors import APIError

T = TypeVar("T")
DONE = format_sse_event(data_str="[DONE]")


# Proxies must pass each event on at once (nginx buffers unless told not to).
_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(frozen=True)
class StreamUsage:
    """Where a stream reports token usage: in a last chunk of its own (`stream_options.include_usage`),
    and in every chunk, its choice's so far (vLLM's `continuous_usage_stats`, with include_usage)."""

    final: bool
    continuous: bool


def event_stream(events: AsyncIterator[bytes]) -> EventSourceResponse:
    return EventSourceResponse(events, headers=_HEADERS)


def sse_chunk(chunk: BaseModel) -> bytes:
    return format_sse_event(data_str=chunk.model_dump_json())


def sse_error(error: APIError) -> bytes:
    """An error after the stream began (the status is already 200): sent as an event of its own."""
    return format_sse_event(data_str=json.dumps(error.body()))


async def primed(events: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    """`events`, having waited for the first one: an error before any output (the verifier refusing
    the request, or down) then still becomes an HTTP error status instead of a 200 stream."""
    try:
        first = await anext(events)
    except StopAsyncIteration:
        return _empty()
    except BaseException:
        await events.aclose()
        raise
    return _chain(first, events)


async def _empty() -> AsyncGenerator[T, None]:
    return
    yield


async def _chain(first: T, rest: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    try:
        yield first
        async for item in rest:
            yield item
    finally:
        await rest.aclose()

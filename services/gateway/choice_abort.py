"""A choice stopped before its end by a flag (SGLang's /abort_request, native/aborts.py): its events
until the flag is set, then its source is closed (which cancels its Generate call, so the verifier
frees the request) and the choice ends with finish reason `abort`, holding what it had."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TypeVar

from treespec.gateway.generation import ChoiceEnd, Event

T = TypeVar("T")

ABORT = "abort"


async def abortable(
    events: AsyncGenerator[Event, None], index: int, flag: asyncio.Event
) -> AsyncGenerator[Event, None]:
    """Choice `index`'s events, ended by an abort when `flag` is set before its own end."""
    completion_tokens, ended = 0, False
    async with aclosing(until_set(events, flag)) as watched:
        async for event in watched:
            completion_tokens = event.completion_tokens
            ended = isinstance(event, ChoiceEnd)
            yield event
    if not ended and flag.is_set():
        yield ChoiceEnd(index, ABORT, completion_tokens, spec=None)


async def until_set(events: AsyncGenerator[T, None], flag: asyncio.Event) -> AsyncGenerator[T, None]:
    """`events` until they end or `flag` is set; then they are closed (cancelling what they wait on).
    Each next event is awaited in a task of its own, beside the flag; a consumer that stops waiting
    (a client gone, its task cancelled) cancels that task too, so the source's call ends with it
    (left running, it held the verifier's request and the source could not be closed)."""
    async with aclosing(events):
        waiter = asyncio.ensure_future(flag.wait())
        step: asyncio.Future[T] | None = None
        try:
            while True:
                step = asyncio.ensure_future(events.__anext__())
                done, _ = await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if step not in done:
                    return
                try:
                    value = step.result()
                except StopAsyncIteration:
                    return
                step = None
                yield value
        finally:
            waiter.cancel()
            if step is not None and not step.done():
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await step

"""The typed events of a response made in the background and streamed (`background` and `stream`, as
on OpenAI's service): the gateway's task appends them as the response is made, and any number of
clients follow them, from the start (the request that created it) or after a sequence number
(`GET /v1/responses/{id}?stream=true&starting_after=N`, a client that lost its connection). A client
that goes away stops following; the response is made all the same."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

Event = dict[str, Any]


class EventLog:
    def __init__(self) -> None:
        self._events: list[Event] = []
        self._closed = False
        self._changed = asyncio.Event()  # set on every append and on close, cleared once awaited

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._events)

    def append(self, event: Event) -> None:
        """The next event; its `sequence_number` is its place in the log."""
        if self._closed:
            raise RuntimeError("the response's events have ended")
        if event.get("sequence_number") != len(self._events):
            raise ValueError(f"event {event.get('sequence_number')} appended as event {len(self._events)}")
        self._events.append(event)
        self._wake()

    def close(self) -> None:
        """No event follows (the response ended, was cancelled or failed)."""
        self._closed = True
        self._wake()

    async def follow(self, starting_after: int = -1) -> AsyncGenerator[Event, None]:
        """The events after sequence number `starting_after`, those logged already and then each as
        it comes, until the log closes."""
        position = max(starting_after + 1, 0)
        while True:
            while position < len(self._events):
                yield self._events[position]
                position += 1
            if self._closed:
                return
            await self._changed.wait()

    def since(self, position: int) -> list[Event]:
        """The events logged from `position` on."""
        return self._events[position:]

    async def wait(self, position: int, timeout_s: float) -> None:
        """Until there is an event at `position` or the log closes, or `timeout_s` has passed."""
        if position < len(self._events) or self._closed:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()  # followers awaiting the old one wake; later ones wait anew


def error_event(code: str | None, message: str, param: str | None = None) -> Event:
    """The typed event that ends a stream with an error, not yet numbered."""
    return {"type": "error", "code": code, "message": message, "param": param}

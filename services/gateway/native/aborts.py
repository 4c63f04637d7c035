"""SGLang's POST /abort_request: stop native generations by their `rid` (or all of them).

A /generate call registers its outputs' rids while it runs. An abort sets the call's flag; its
events then stop (which cancels the verifier calls, so the verifier frees their requests), and the
outputs not yet finished end with SGLang's `{"type": "abort"}` finish reason and what they had.
An unknown rid is no error: the request may have ended already, as SGLang answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import TypeVar

T = TypeVar("T")


class AbortRegistry:
    """The running native generations' abort flags, by rid (one flag per /generate call)."""

    def __init__(self) -> None:
        self._flags: dict[str, set[asyncio.Event]] = {}

    def open(self, rids: Sequence[str]) -> asyncio.Event:
        flag = asyncio.Event()
        for rid in rids:
            self._flags.setdefault(rid, set()).add(flag)
        return flag

    def close(self, rids: Sequence[str], flag: asyncio.Event) -> None:
        for rid in rids:
            flags = self._flags.get(rid)
            if flags is not None:
                flags.discard(flag)
                if not flags:
                    del self._flags[rid]

    async def watch(self, events: AsyncGenerator[T, None], rids: Sequence[str]) -> AsyncGenerator[T, None]:
        """`events` until they end or one of `rids` is aborted; registered meanwhile."""
        flag = self.open(rids)
        try:
            async with aclosing(until_aborted(events, flag)) as watched:
                async for value in watched:
                    yield value
        finally:
            self.close(rids, flag)

    def abort(self, rid: str, abort_all: bool = False) -> int:
        """Set the flags of `rid`'s calls (every call's with `abort_all`); how many calls."""
        flags = {f for fs in self._flags.values() for f in fs} if abort_all else self._flags.get(rid, set())
        for flag in flags:
            flag.set()
        return len(flags)


async def until_aborted(events: AsyncGenerator[T, None], flag: asyncio.Event) -> AsyncGenerator[T, None]:
    """`events` until they end or `flag` is set; then they are closed (cancelling what they wait on)."""
    async with aclosing(events):
        waiter = asyncio.ensure_future(flag.wait())
        try:
            while True:
                step = asyncio.ensure_future(events.__anext__())
                done, _ = await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if step not in done:
                    step.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await step
                    return
                try:
                    value = step.result()
                except StopAsyncIteration:
                    return
                yield value
        finally:
            waiter.cancel()

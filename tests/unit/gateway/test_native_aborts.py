"""The abort registry of SGLang's /abort_request: flags by rid, and events that stop when one is set."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from treespec.gateway.native.aborts import AbortRegistry


def test_flags_are_set_by_rid_or_all_and_forgotten_when_closed() -> None:
    registry = AbortRegistry()
    one, two = registry.open(["a", "b"]), registry.open(["b"])
    assert registry.abort("a") == 1 and one.is_set() and not two.is_set()
    registry.close(["a", "b"], one)
    assert registry.abort("a") == 0
    assert registry.abort("", abort_all=True) == 1 and two.is_set()
    registry.close(["b"], two)
    assert registry.abort("", abort_all=True) == 0


def test_watched_events_stop_at_an_abort_and_close_their_source() -> None:
    closed: list[bool] = []

    async def endless() -> AsyncGenerator[int, None]:
        try:
            n = 0
            while True:
                await asyncio.sleep(0.01)
                yield n
                n += 1
        finally:
            closed.append(True)

    async def run() -> list[int]:
        registry = AbortRegistry()
        got: list[int] = []
        async for value in registry.watch(endless(), ["r"]):
            got.append(value)
            if value == 3:
                registry.abort("r")
        assert registry.abort("r") == 0  # no longer registered
        return got

    assert asyncio.run(run()) == [0, 1, 2, 3] and closed == [True]


def test_watched_events_that_end_end_the_watch() -> None:
    async def three() -> AsyncGenerator[int, None]:
        for n in range(3):
            yield n

    async def run() -> list[int]:
        return [v async for v in AbortRegistry().watch(three(), ["r"])]

    assert asyncio.run(run()) == [0, 1, 2]

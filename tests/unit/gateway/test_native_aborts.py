"""The abort registry of SGLang's /abort_request (flags by rid), and a choice's events that stop when
its flag is set (choice_abort.py): the source closed, the choice ended with finish reason abort."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from treespec.gateway.choice_abort import ABORT, abortable, until_set
from treespec.gateway.generation import ChoiceEnd, Event, TextDelta
from treespec.gateway.native.aborts import AbortRegistry, AbortTarget


def test_flags_are_set_by_rid_or_all_and_forgotten_when_closed() -> None:
    registry = AbortRegistry()
    one, two = AbortTarget(("a-0", "a"), asyncio.Event()), AbortTarget(("a-1", "a"), asyncio.Event())
    other = AbortTarget(("b",), asyncio.Event())
    registry.open([one, two, other])
    assert registry.abort("a-1") == 1 and two.flag.is_set() and not one.flag.is_set()
    assert registry.abort("a") == 2 and one.flag.is_set() and not other.flag.is_set()
    registry.close([one, two])
    assert registry.abort("a") == 0
    assert registry.abort("", abort_all=True) == 1 and other.flag.is_set()
    registry.close([other])
    assert registry.abort("", abort_all=True) == 0


def test_watched_events_register_their_targets_while_they_run() -> None:
    async def three() -> AsyncGenerator[int, None]:
        for n in range(3):
            yield n

    async def run() -> tuple[list[int], int]:
        registry = AbortRegistry()
        target = AbortTarget(("r",), asyncio.Event())
        got = []
        async for value in registry.watch(three(), [target]):
            got.append(value)
            assert registry.abort("r") == 1
        return got, registry.abort("r")

    assert asyncio.run(run()) == ([0, 1, 2], 0)


def _endless(closed: list[bool]) -> AsyncGenerator[Event, None]:
    async def deltas() -> AsyncGenerator[Event, None]:
        try:
            n = 0
            while True:
                await asyncio.sleep(0.01)
                n += 1
                yield TextDelta(0, "x", completion_tokens=n, token_ids=(n,))
        finally:
            closed.append(True)

    return deltas()


def test_events_stop_when_the_flag_is_set_and_close_their_source() -> None:
    closed: list[bool] = []

    async def run() -> list[int]:
        flag, got = asyncio.Event(), []
        async for event in until_set(_endless(closed), flag):
            got.append(event.completion_tokens)
            if len(got) == 3:
                flag.set()
        return got

    assert asyncio.run(run()) == [1, 2, 3] and closed == [True]


def test_an_aborted_choice_ends_with_abort_and_the_tokens_it_had() -> None:
    closed: list[bool] = []

    async def run() -> list[Event]:
        flag, got = asyncio.Event(), []
        async for event in abortable(_endless(closed), 4, flag):
            got.append(event)
            if len(got) == 2:
                flag.set()
        return got

    events = asyncio.run(run())
    assert events[-1] == ChoiceEnd(4, ABORT, 2, spec=None) and len(events) == 3 and closed == [True]


def test_a_choice_that_ends_first_is_not_aborted() -> None:
    end = ChoiceEnd(0, "length", 1, spec=None)

    async def one() -> AsyncGenerator[Event, None]:
        yield TextDelta(0, "x", completion_tokens=1)
        yield end

    async def run() -> list[Event]:
        flag, got = asyncio.Event(), []
        async for event in abortable(one(), 0, flag):
            got.append(event)
        flag.set()  # too late: the choice has ended
        return got

    assert asyncio.run(run())[-1] == end


def test_a_consumer_that_stops_waiting_ends_the_source_s_wait_too() -> None:
    """A client gone (its task cancelled while the next event is awaited): the source's pending call
    is cancelled and the source closed, not left running in the task that awaited it."""
    stages: list[str] = []

    async def waiting() -> AsyncGenerator[Event, None]:
        try:
            yield TextDelta(0, "x", completion_tokens=1)
            stages.append("waiting")
            await asyncio.Event().wait()  # a verifier call that has no more to say yet
        except asyncio.CancelledError:
            stages.append("cancelled")
            raise
        finally:
            stages.append("closed")

    async def run() -> None:
        async def consume() -> None:
            async for _ in abortable(waiting(), 0, asyncio.Event()):
                pass

        consumer = asyncio.create_task(consume())
        while "waiting" not in stages:
            await asyncio.sleep(0)
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        # Before the loop ends (asyncio.run cancels what is left running as it closes).
        assert stages == ["waiting", "cancelled", "closed"]

    asyncio.run(run())

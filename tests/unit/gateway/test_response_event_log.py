"""The event log of a streamed background response: followers get every event after the one they
name, those logged before they came and those logged after, in order, and stop when it closes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from treespec.gateway.responses_api.event_log import EventLog


def _event(n: int) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "delta": f"t{n}", "sequence_number": n}


async def _all(log: EventLog, starting_after: int = -1) -> list[int]:
    return [event["sequence_number"] async for event in log.follow(starting_after)]


def test_followers_get_the_backlog_then_each_new_event_until_it_closes() -> None:
    async def scenario() -> tuple[list[int], list[int], list[int]]:
        log = EventLog()
        for n in range(3):
            log.append(_event(n))
        early = asyncio.create_task(_all(log))
        resumed = asyncio.create_task(_all(log, starting_after=1))
        await asyncio.sleep(0)
        for n in range(3, 6):
            log.append(_event(n))
            await asyncio.sleep(0)
        late = asyncio.create_task(_all(log, starting_after=4))
        await asyncio.sleep(0)
        log.close()
        return await early, await resumed, await late

    early, resumed, late = asyncio.run(scenario())
    assert early == [0, 1, 2, 3, 4, 5]
    assert resumed == [2, 3, 4, 5]
    assert late == [5]


def test_a_follower_after_the_end_gets_nothing_and_a_closed_log_takes_no_event() -> None:
    async def scenario() -> list[int]:
        log = EventLog()
        log.append(_event(0))
        log.close()
        with pytest.raises(RuntimeError):
            log.append(_event(1))
        return await _all(log, starting_after=7)

    assert asyncio.run(scenario()) == []


def test_an_event_out_of_sequence_is_refused() -> None:
    log = EventLog()
    log.append(_event(0))
    with pytest.raises(ValueError):
        log.append(_event(2))
    assert len(log) == 1


def test_a_follower_that_leaves_does_not_stop_the_log() -> None:
    async def scenario() -> list[int]:
        log = EventLog()
        follower = log.follow()
        log.append(_event(0))
        assert (await anext(follower))["sequence_number"] == 0
        await follower.aclose()  # the client went away
        log.append(_event(1))
        log.close()
        return await _all(log)

    assert asyncio.run(scenario()) == [0, 1]

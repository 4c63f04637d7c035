"""Streamed background responses' events in a real redis-server (started on a free port): what one
replica logs, another follows, from the start or after a sequence number, until the events end; a
deleted (or LRU-dropped) response takes its events with it and stops their writer; a hung Redis
delays the events, loses none, and a stream that lapsed meanwhile is written again from the start;
a follower whose stream vanishes, or whose Redis fails, is told so by an error event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from tests.redis_server import RedisServer
from tests.unit.gateway.test_redis_response_store import _stored
from treespec.gateway.responses_api.event_log import Event, EventLog
from treespec.gateway.responses_api.redis_events import RedisEventStreams
from treespec.gateway.responses_api.redis_store import EVENTS_PREFIX, RedisResponseStore

TTL_S = 60


def _event(sequence_number: int) -> Event:
    return {
        "type": "response.output_text.delta",
        "delta": f"d{sequence_number}",
        "sequence_number": sequence_number,
    }


def _log(count: int) -> EventLog:
    log = EventLog()
    for number in range(count):
        log.append(_event(number))
    return log


async def _begun(
    store: RedisResponseStore, maker: RedisEventStreams, response_id: str, count: int
) -> tuple[EventLog, asyncio.Task[None]]:
    """A stored response whose first `count` events are logged, and their writer running."""
    await store.put(_stored(response_id))
    assert await maker.open(response_id)
    log = _log(count)
    writer = asyncio.create_task(maker.write(response_id, log))
    await asyncio.sleep(0.3)
    return log, writer


async def _collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]


def _run(url: str, scenario: Callable[..., Awaitable[Any]], timeout_s: float = 2.0) -> Any:
    async def closing() -> Any:
        store = RedisResponseStore(url, 8)
        maker, other = RedisEventStreams(url, TTL_S, timeout_s), RedisEventStreams(url, TTL_S, timeout_s)
        try:
            return await asyncio.wait_for(scenario(store, maker, other), 30)
        finally:
            for closable in (store, maker, other):
                await closable.close()

    return asyncio.run(closing())


def test_another_replica_follows_the_events_from_the_start_or_after_a_number(
    module_redis_server: RedisServer,
) -> None:
    async def scenario(store: RedisResponseStore, maker: RedisEventStreams, other: RedisEventStreams) -> None:
        await store.put(_stored("resp_1"))
        assert not await other.exists("resp_1")
        assert await maker.open("resp_1")
        assert await other.exists("resp_1")  # found before any event is made
        log = _log(3)
        writer = asyncio.create_task(maker.write("resp_1", log))
        follower = asyncio.create_task(_collect(other.follow("resp_1")))
        late = asyncio.create_task(_collect(other.follow("resp_1", starting_after=3)))
        await asyncio.sleep(0.3)
        assert not follower.done()  # the events go on
        for number in range(3, 6):
            log.append(_event(number))
            await asyncio.sleep(0.05)
        log.close()
        await asyncio.wait_for(writer, 5)
        assert await follower == [_event(n) for n in range(6)]
        assert await late == [_event(4), _event(5)]
        replayed = await _collect(other.follow("resp_1", starting_after=1))
        assert replayed == [_event(n) for n in range(2, 6)]
        assert await _collect(other.follow("resp_1", starting_after=9)) == []

    _run(module_redis_server.url, scenario)


def test_a_deleted_or_dropped_response_takes_its_events_and_stops_their_writer(
    module_redis_server: RedisServer,
) -> None:
    async def scenario(store: RedisResponseStore, maker: RedisEventStreams, other: RedisEventStreams) -> None:
        log, writer = await _begun(store, maker, "gone", 2)
        follower = asyncio.create_task(_collect(other.follow("gone")))
        await asyncio.sleep(0.3)
        await store.delete("gone")
        assert not await other.exists("gone")
        log.append(_event(2))  # the writer finds the response gone, and stops without writing it
        await asyncio.wait_for(writer, 5)
        assert not await other.exists("gone")
        events = await follower
        assert events[:2] == [_event(0), _event(1)]
        assert (events[2]["type"], events[2]["code"], events[2]["sequence_number"]) == (
            "error",
            "events_unavailable",
            2,
        )
        small = RedisResponseStore(module_redis_server.url, 1)
        await small.put(_stored("older"))
        await maker.open("older")
        await small.put(_stored("newer"))  # past the capacity: the older response goes, events too
        assert not await other.exists("older")
        await small.close()

    _run(module_redis_server.url, scenario)


def test_a_hung_redis_delays_the_events_and_loses_none(redis_server: RedisServer) -> None:
    async def scenario(store: RedisResponseStore, maker: RedisEventStreams, other: RedisEventStreams) -> None:
        log, writer = await _begun(store, maker, "slow", 2)
        redis_server.hang()
        try:
            log.append(_event(2))
            log.append(_event(3))
            log.close()
            stalled = await _collect(other.follow("slow"))  # told, not left waiting
            assert [event["code"] for event in stalled] == ["store_unavailable"]
            assert not writer.done()  # tries again
        finally:
            redis_server.resume()
        await asyncio.wait_for(writer, 10)
        assert await _collect(other.follow("slow")) == [_event(n) for n in range(4)]

    _run(redis_server.url, scenario, timeout_s=0.5)


def test_a_stream_that_lapsed_is_written_again_from_the_first_event(module_redis_server: RedisServer) -> None:
    async def scenario(store: RedisResponseStore, maker: RedisEventStreams, other: RedisEventStreams) -> None:
        log, writer = await _begun(store, maker, "lapsed", 3)
        await store._link.client.delete(f"{EVENTS_PREFIX}lapsed")  # as if it expired while Redis was away
        log.append(_event(3))
        log.close()
        await asyncio.wait_for(writer, 5)
        assert await _collect(other.follow("lapsed")) == [_event(n) for n in range(4)]

    _run(module_redis_server.url, scenario)

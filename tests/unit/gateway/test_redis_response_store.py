"""Stored responses in a real redis-server (started on a free port): two gateway replicas' stores
share them, the capacity drops the least recently used across replicas, the TTL expires them; a
Redis that is down or hung never fails storing (it is skipped), reading is a 503 meanwhile, and the
store works again once Redis is back; the replicas' orders reach every replica, those given while
a replica's connection was down too, and again after a Redis restart."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.redis_server import RedisServer
from tests.unit.gateway.closing_stores import run_closing
from tests.unit.gateway.test_responses_store import REPLY, _body, _request
from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.redis_store import ORDERS, RedisResponseStore
from treespec.gateway.responses_api.store import StoredResponse, StoreOrder


def _stored(response_id: str, earlier: StoredResponse | None = None) -> StoredResponse:
    conversation = earlier.conversation if earlier is not None else ()
    return StoredResponse.of(
        _body(response_id, [REPLY]), _request(input=f"about {response_id}").items, conversation
    )


async def _status(store: RedisResponseStore, response_id: str) -> int:
    try:
        await store.get(response_id)
    except APIError as error:
        return error.status
    return 200


def test_replicas_share_their_stored_responses(redis_server: RedisServer) -> None:
    async def scenario(a: RedisResponseStore, b: RedisResponseStore) -> None:
        first = _stored("resp_1")
        await a.put(first)
        assert await b.get("resp_1") == first
        second = _stored("resp_2", earlier=await b.get("resp_1"))  # continued on the other replica
        await b.put(second)
        assert (await a.get("resp_2")).conversation == second.conversation
        await b.delete("resp_1")
        assert await _status(a, "resp_1") == 404
        with pytest.raises(APIError) as missing:
            await a.get("resp_1", "previous_response_id")
        assert (missing.value.code, missing.value.param) == (
            "previous_response_not_found",
            "previous_response_id",
        )
        with pytest.raises(APIError):
            await a.delete("resp_1")

    run_closing(scenario, RedisResponseStore(redis_server.url, 8), RedisResponseStore(redis_server.url, 8))


def test_the_capacity_drops_the_least_recently_used_and_the_ttl_expires(redis_server: RedisServer) -> None:
    async def scenario(a: RedisResponseStore, b: RedisResponseStore, brief: RedisResponseStore) -> None:
        await a.put(_stored("a"))
        await b.put(_stored("b"))
        await b.get("a")  # used on the other replica: b is now the oldest
        await a.put(_stored("c"))
        assert [await _status(a, name) for name in ("a", "b", "c")] == [200, 404, 200]
        await brief.put(_stored("short"))
        assert await _status(a, "short") == 200
        await asyncio.sleep(1.3)
        assert await _status(a, "short") == 404

    stores = RedisResponseStore(redis_server.url, 2), RedisResponseStore(redis_server.url, 2)
    run_closing(scenario, *stores, RedisResponseStore(redis_server.url, 2, ttl_s=1))


def test_a_store_of_size_zero_keeps_nothing_and_bad_settings_are_refused(redis_server: RedisServer) -> None:
    async def scenario(none: RedisResponseStore) -> int:
        await none.put(_stored("a"))
        return await _status(none, "a")

    assert run_closing(scenario, RedisResponseStore(redis_server.url, 0)) == 404
    with pytest.raises(ValueError, match="negative"):
        RedisResponseStore(redis_server.url, -1)
    with pytest.raises(ValueError, match="TTL"):
        RedisResponseStore(redis_server.url, 1, ttl_s=0)


@pytest.mark.parametrize("outage", ["down", "hung"])
def test_an_outage_skips_storing_makes_reading_a_503_and_passes(
    redis_server: RedisServer, outage: str
) -> None:
    async def scenario(store: RedisResponseStore) -> None:
        await store.put(_stored("before"))
        redis_server.stop() if outage == "down" else redis_server.hang()
        start = time.monotonic()
        await store.put(_stored("during"))  # skipped, not raised
        with pytest.raises(APIError) as unavailable:
            await store.get("before")
        assert time.monotonic() - start < 3.0  # each command waits its timeout at most
        assert (unavailable.value.status, unavailable.value.code) == (503, "store_unavailable")
        redis_server.start() if outage == "down" else redis_server.resume()
        await store.put(_stored("after"))
        assert (await store.get("after")).id == "after"
        expected = 404 if outage == "down" else 200  # a crash loses what Redis held (no persistence)
        assert await _status(store, "before") == expected

    run_closing(scenario, RedisResponseStore(redis_server.url, 8, timeout_s=0.5))


def test_orders_reach_every_replica_even_across_a_dropped_connection_and_a_redis_restart(
    redis_server: RedisServer,
) -> None:
    async def scenario(a: RedisResponseStore, b: RedisResponseStore) -> None:
        heard = b.orders()
        listening = asyncio.ensure_future(anext(heard))
        await asyncio.sleep(0.3)  # subscribed
        await a._link.client.xadd(ORDERS, {"not": "an order"})  # ignored
        await a.order(StoreOrder("cancel", "resp_1"))
        assert await asyncio.wait_for(listening, 5) == StoreOrder("cancel", "resp_1")
        listening = asyncio.ensure_future(anext(heard))
        await asyncio.sleep(0.3)  # b is reading
        killed = await a._link.client.client_kill_filter(_type="normal", skipme=True)  # b's drops
        assert killed >= 1
        await a.order(StoreOrder("cancel", "resp_3"))  # meanwhile: heard once b reads again
        assert await asyncio.wait_for(listening, 5) == StoreOrder("cancel", "resp_3")
        redis_server.stop()
        with pytest.raises(APIError) as unavailable:
            await a.order(StoreOrder("forget", "resp_2"))
        assert unavailable.value.status == 503
        listening = asyncio.ensure_future(anext(heard))
        redis_server.start()
        deadline = time.monotonic() + 10
        while not listening.done() and time.monotonic() < deadline:  # until b has subscribed again
            await a.order(StoreOrder("forget", "resp_2"))
            await asyncio.sleep(0.3)
        assert await asyncio.wait_for(listening, 1) == StoreOrder("forget", "resp_2")
        await heard.aclose()

    run_closing(scenario, RedisResponseStore(redis_server.url, 8), RedisResponseStore(redis_server.url, 8))

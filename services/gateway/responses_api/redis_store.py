"""Stored Responses API responses in Redis (`--responses-store-url redis://host:6379/0`): every gateway
replica reads and continues every other's responses, so a conversation's requests may go to any
replica, and a gateway restart loses none.

Each response is one key holding its JSON (`treespec:responses:r:{id}`), expiring `ttl_s` after it
was last written (`--responses-store-ttl`, 30 days by default, as OpenAI keeps responses). A sorted set
ranks them by last use on a counter of the store's own (not the replicas' clocks); writing past the
capacity drops the least recently used. Each operation is one Lua script, so one round trip and
atomic among replicas.

Replicas order each other about background responses (cancel one, forget a deleted one) through a
Redis stream: each replica reads every order after the last it heard, and carries out those about
the responses it makes.

Redis down or slow (each command waits `timeout_s` at most) never fails a response being made: it is
answered as made, the store's warning logged once per outage, and not stored. Reading one back, or
an order, is a 503 until Redis answers again (the client reconnects by itself; the listener reads
on from the last order it heard).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Any

from redis.commands.core import AsyncScript

from treespec.gateway.responses_api.redis_link import LRU_FUNCTIONS, TIMEOUT_S, RedisLink
from treespec.gateway.responses_api.redis_orders import OrderStream
from treespec.gateway.responses_api.store import StoredResponse, StoreOrder, not_found

log = logging.getLogger(__name__)  # orders that are none

PREFIX = "treespec:responses"
RESPONSES_PREFIX = f"{PREFIX}:r:"  # a response's key: this and its id
EVENTS_PREFIX = f"{PREFIX}:e:"  # a streamed background response's events (redis_events.py)
DEFAULT_TTL_S = 30 * 24 * 3600
ORDERS = f"{PREFIX}:orders"  # the replicas' orders: a Redis stream (redis_orders.py)

# KEYS: the response's key, the ranking, the counter; ARGV: id, JSON, TTL, capacity, the prefixes of
# the keys a dropped response takes with it (its own, its events').
_PUT = (
    LRU_FUNCTIONS
    + """
redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
use(KEYS[2], KEYS[3], ARGV[1])
return trim(KEYS[2], tonumber(ARGV[4]), {ARGV[5], ARGV[6]})
"""
)

# The response's JSON, its use recorded; nil (and its rank dropped) when it is not stored.
_GET = (
    LRU_FUNCTIONS
    + """
return looked_up(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
"""
)

# Its events go with it.
_DELETE = """
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[4])
return redis.call('DEL', KEYS[1])
"""


class RedisResponseStore:
    def __init__(
        self, url: str, capacity: int, ttl_s: int = DEFAULT_TTL_S, timeout_s: float = TIMEOUT_S
    ) -> None:
        if capacity < 0:
            raise ValueError("the responses store's capacity cannot be negative")
        if ttl_s <= 0:
            raise ValueError("the responses store's TTL must be positive")
        self.capacity = capacity
        self.ttl_s = ttl_s
        self._link = RedisLink(url, "responses store", timeout_s)
        self._put = self._link.script(_PUT)
        self._get = self._link.script(_GET)
        self._delete = self._link.script(_DELETE)
        self._orders = OrderStream(self._link, ORDERS)

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    async def put(self, response: StoredResponse) -> None:
        if not self.enabled:
            return
        args: list[str | int] = [response.id, response.to_json(), self.ttl_s, self.capacity]
        args += [RESPONSES_PREFIX, EVENTS_PREFIX]
        await self._link.attempt(self._put(keys=self._keys(response.id), args=args))  # else not stored

    async def get(self, response_id: str, param: str | None = None) -> StoredResponse:
        value = await self._call(self._get, response_id)
        if value is None:
            raise not_found(response_id, param)
        return StoredResponse.from_json(value)

    async def delete(self, response_id: str) -> None:
        if not await self._call(self._delete, response_id):
            raise not_found(response_id, None)

    async def close(self) -> None:
        await self._link.close()

    @property
    def shared(self) -> bool:
        return True

    async def order(self, order: StoreOrder) -> None:
        await self._orders.send({"action": order.action, "response_id": order.response_id})

    async def orders(self) -> AsyncGenerator[StoreOrder, None]:
        """Every replica's orders (this one's too) from now on (redis_orders.py)."""
        async for fields in self._orders.entries():
            order = _order(fields)
            if order is not None:
                yield order

    async def _call(self, script: AsyncScript, response_id: str) -> Any:
        return await self._link.call(script(keys=self._keys(response_id), args=[response_id]))

    @staticmethod
    def _keys(response_id: str) -> list[str]:
        return [
            f"{RESPONSES_PREFIX}{response_id}",
            f"{PREFIX}:lru",
            f"{PREFIX}:clock",
            f"{EVENTS_PREFIX}{response_id}",
        ]


def _order(fields: dict[bytes, bytes]) -> StoreOrder | None:
    """An entry of the stream as an order; None (logged) for one that is not."""
    action, response_id = fields.get(b"action"), fields.get(b"response_id")
    if action in (b"cancel", b"forget") and response_id:
        return StoreOrder("cancel" if action == b"cancel" else "forget", response_id.decode())
    log.warning("ignored an entry of %s that is no order: %r", ORDERS, fields)
    return None

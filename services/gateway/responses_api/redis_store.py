"""Stored Responses API responses in Redis (`--responses-store-url redis://host:6379/0`): every gateway
replica reads and continues every other's responses, so a conversation's requests may go to any
replica, and a gateway restart loses none.

Each response is one key holding its JSON (`treespec:responses:r:{id}`), expiring `ttl_s` after it
was last written (`--responses-store-ttl`, 30 days by default, as OpenAI keeps responses). A sorted set
ranks them by last use on a counter of the store's own (not the replicas' clocks); writing past the
capacity drops the least recently used. Each operation is one Lua script, so one round trip and
atomic among replicas.

Replicas order each other about background responses (cancel one, forget a deleted one) on a pub/sub
channel: each replica listens and carries out the orders about the responses it makes.

Redis down or slow (each command waits `timeout_s` at most) never fails a response being made: it is
answered as made, the store's warning logged once per outage, and not stored. Reading one back, or
an order, is a 503 until Redis answers again (the client reconnects by itself; the listener
subscribes again).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from treespec.gateway.responses_api.redis_link import LRU_FUNCTIONS, TIMEOUT_S, RedisLink
from treespec.gateway.responses_api.store import StoredResponse, StoreOrder, not_found

log = logging.getLogger(__name__)  # orders that are none

PREFIX = "treespec:responses"
DEFAULT_TTL_S = 30 * 24 * 3600
ORDERS = f"{PREFIX}:orders"  # the replicas' pub/sub channel
LISTEN_S = 1.0  # the listener's wait for a message between checks of its connection
RESUBSCRIBE_S = 1.0

# KEYS: the response's key, the ranking, the counter; ARGV: id, JSON, TTL, capacity, key prefix.
_PUT = (
    LRU_FUNCTIONS
    + """
redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
use(KEYS[2], KEYS[3], ARGV[1])
return trim(KEYS[2], tonumber(ARGV[4]), {ARGV[5]})
"""
)

# The response's JSON, its use recorded; nil (and its rank dropped) when it is not stored.
_GET = (
    LRU_FUNCTIONS
    + """
return looked_up(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
"""
)

_DELETE = """
redis.call('ZREM', KEYS[2], ARGV[1])
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

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    async def put(self, response: StoredResponse) -> None:
        if not self.enabled:
            return
        args: list[str | int] = [response.id, response.to_json(), self.ttl_s, self.capacity, f"{PREFIX}:r:"]
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
        message = json.dumps({"action": order.action, "response_id": order.response_id})
        await self._link.call(self._link.client.publish(ORDERS, message))

    async def orders(self) -> AsyncGenerator[StoreOrder, None]:
        """Every replica's orders (this one's too), subscribing again after an outage (orders sent
        meanwhile are lost, as pub/sub goes)."""
        while True:
            pubsub = self._link.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(ORDERS)
                while True:
                    message = await pubsub.get_message(timeout=LISTEN_S)
                    order = _order(message["data"]) if message is not None else None
                    if order is not None:
                        yield order
            except RedisError as error:
                self._link.failed(error)
                await asyncio.sleep(RESUBSCRIBE_S)
            finally:
                await pubsub.aclose()

    async def _call(self, script: AsyncScript, response_id: str) -> Any:
        return await self._link.call(script(keys=self._keys(response_id), args=[response_id]))

    @staticmethod
    def _keys(response_id: str) -> list[str]:
        return [f"{PREFIX}:r:{response_id}", f"{PREFIX}:lru", f"{PREFIX}:clock"]


def _order(data: bytes | str) -> StoreOrder | None:
    """A message on the channel as an order; None (logged) for one that is not."""
    try:
        fields = json.loads(data)
        if fields["action"] in ("cancel", "forget") and isinstance(fields["response_id"], str):
            return StoreOrder(fields["action"], fields["response_id"])
    except (ValueError, KeyError, TypeError):
        pass
    log.warning("ignored a message on %s that is no order: %r", ORDERS, data)
    return None

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

import redis.asyncio as redis
from redis.exceptions import RedisError

from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.store import StoredResponse, StoreOrder, not_found

log = logging.getLogger(__name__)

PREFIX = "treespec:responses"
DEFAULT_TTL_S = 30 * 24 * 3600
TIMEOUT_S = 2.0
ORDERS = f"{PREFIX}:orders"  # the replicas' pub/sub channel
LISTEN_S = 1.0  # the listener's wait for a message between checks of its connection
RESUBSCRIBE_S = 1.0

# KEYS: the response's key, the ranking, the counter; ARGV: id, JSON, TTL, capacity, key prefix.
_PUT = """
local tick = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
redis.call('ZADD', KEYS[2], tick, ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do
    redis.call('DEL', ARGV[5] .. old)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
return over
"""

# The response's JSON, its use recorded; nil (and its rank dropped) when it is not stored.
_GET = """
local value = redis.call('GET', KEYS[1])
if not value then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return false
end
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[1])
return value
"""

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
        self._url = url
        self._client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._put = self._client.register_script(_PUT)
        self._get = self._client.register_script(_GET)
        self._delete = self._client.register_script(_DELETE)
        self._down = False

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    async def put(self, response: StoredResponse) -> None:
        if not self.enabled:
            return
        args: list[str | int] = [response.id, response.to_json(), self.ttl_s, self.capacity, f"{PREFIX}:r:"]
        try:
            await self._put(keys=self._keys(response.id), args=args)
        except RedisError as error:
            self._failed(error)
            return
        self._up()

    async def get(self, response_id: str, param: str | None = None) -> StoredResponse:
        value = await self._call(self._get, response_id)
        if value is None:
            raise not_found(response_id, param)
        return StoredResponse.from_json(value)

    async def delete(self, response_id: str) -> None:
        if not await self._call(self._delete, response_id):
            raise not_found(response_id, None)

    async def close(self) -> None:
        await self._client.aclose()

    @property
    def shared(self) -> bool:
        return True

    async def order(self, order: StoreOrder) -> None:
        message = json.dumps({"action": order.action, "response_id": order.response_id})
        await self._unavailable_as_503(self._client.publish(ORDERS, message))

    async def orders(self) -> AsyncGenerator[StoreOrder, None]:
        """Every replica's orders (this one's too), subscribing again after an outage (orders sent
        meanwhile are lost, as pub/sub goes)."""
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(ORDERS)
                while True:
                    message = await pubsub.get_message(timeout=LISTEN_S)
                    order = _order(message["data"]) if message is not None else None
                    if order is not None:
                        yield order
            except RedisError as error:
                self._failed(error)
                await asyncio.sleep(RESUBSCRIBE_S)
            finally:
                await pubsub.aclose()

    async def _call(self, script: Any, response_id: str) -> Any:
        return await self._unavailable_as_503(script(keys=self._keys(response_id), args=[response_id]))

    async def _unavailable_as_503(self, command: Any) -> Any:
        try:
            result = await command
        except RedisError as error:
            self._failed(error)
            raise APIError(
                503,
                "The response store is unavailable; try again shortly.",
                code="store_unavailable",
                error_type="server_error",
            ) from error
        self._up()
        return result

    @staticmethod
    def _keys(response_id: str) -> list[str]:
        return [f"{PREFIX}:r:{response_id}", f"{PREFIX}:lru", f"{PREFIX}:clock"]

    def _failed(self, error: RedisError) -> None:
        if not self._down:
            log.warning(
                "the responses store at %s is unavailable (%s): responses are not stored", self._url, error
            )
        self._down = True

    def _up(self) -> None:
        if self._down:
            log.info("the responses store at %s answers again", self._url)
        self._down = False


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

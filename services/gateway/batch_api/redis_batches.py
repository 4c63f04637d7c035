"""Batches told to every gateway replica through Redis, beside the stored responses
(`--responses-store-url`; book.py): each batch's object is one key (`treespec:batches:b:{id}`, kept
`ttl_s` after its last write), ranked by creation in a sorted set (the newest `MAX_KEPT` kept); orders
to cancel a batch go through a stream (redis_orders.py) to the replica running it. Writes by the
running replica are attempts (a Redis outage never fails a batch; the next write catches up); reads
and orders are a 503 while Redis does not answer."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

from treespec.gateway.responses_api.redis_link import TIMEOUT_S, RedisLink
from treespec.gateway.responses_api.redis_orders import OrderStream

log = logging.getLogger(__name__)

PREFIX = "treespec:batches"
BATCH_PREFIX = f"{PREFIX}:b:"
RANK = f"{PREFIX}:created"
ORDERS = f"{PREFIX}:orders"
MAX_KEPT = 10_000

# KEYS: the batch's key, the ranking; ARGV: id, JSON, TTL, created_at, most kept, the key prefix.
_PUT = """
redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
redis.call('ZADD', KEYS[2], 'NX', tonumber(ARGV[4]), ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if over > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do redis.call('DEL', ARGV[6] .. old) end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
"""

# KEYS: the ranking; ARGV: the key prefix. Every batch's JSON, oldest first; gone ones leave the rank.
_LIST = """
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local value = redis.call('GET', ARGV[1] .. id)
  if value then table.insert(out, value) else redis.call('ZREM', KEYS[1], id) end
end
return out
"""


class RedisBatchBook:
    def __init__(self, url: str, ttl_s: int, timeout_s: float = TIMEOUT_S) -> None:
        self.ttl_s = ttl_s
        self._link = RedisLink(url, "batches store", timeout_s)
        self._put = self._link.script(_PUT)
        self._list = self._link.script(_LIST)
        self._orders = OrderStream(self._link, ORDERS)

    @property
    def shared(self) -> bool:
        return True

    async def put(self, body: dict[str, Any]) -> None:
        batch_id = body["id"]
        args = [batch_id, json.dumps(body), self.ttl_s, body["created_at"], MAX_KEPT, BATCH_PREFIX]
        await self._link.attempt(self._put(keys=[BATCH_PREFIX + batch_id, RANK], args=args))

    async def get(self, batch_id: str) -> dict[str, Any] | None:
        value = await self._link.call(self._link.client.get(BATCH_PREFIX + batch_id))
        return None if value is None else dict(json.loads(value))

    async def listed(self) -> list[dict[str, Any]]:
        values = await self._link.call(self._list(keys=[RANK], args=[BATCH_PREFIX]))
        return [json.loads(value) for value in values]

    async def order_cancel(self, batch_id: str) -> None:
        await self._orders.send({"action": "cancel", "batch_id": batch_id})

    async def cancel_orders(self) -> AsyncGenerator[str, None]:
        """The ids of the batches any replica is asked to cancel, from now on."""
        async for fields in self._orders.entries():
            batch_id = fields.get(b"batch_id")
            if fields.get(b"action") == b"cancel" and batch_id:
                yield batch_id.decode()
            else:
                log.warning("ignored an entry of %s that is no order: %r", ORDERS, fields)

    async def close(self) -> None:
        await self._link.close()

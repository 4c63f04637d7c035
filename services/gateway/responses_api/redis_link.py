"""A gateway store's connection to Redis (redis_store.py, redis_conversations.py): each command waits
`timeout_s` at most; a failure is logged once per outage, and is a 503 for a client that asked for
something (`call`) or skipped where it must not fail what is being made (`attempt`). The client
reconnects by itself, and a command that finds its pooled connection closed (Redis restarted) is
tried once more on a new one."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from treespec.gateway.errors import APIError

log = logging.getLogger(__name__)

T = TypeVar("T")
TIMEOUT_S = 2.0

# Lua functions the stores' scripts start with: a ranking (a sorted set) of ids by last use, on a
# counter of the store's own (not the replicas' clocks), and dropping the least recently used beyond
# a capacity, with every key of theirs (one per prefix; it returns their ids); a lookup that records
# the use, or drops the rank of an id whose key has expired.
LRU_FUNCTIONS = """
local function use(rank, clock, id)
  redis.call('ZADD', rank, redis.call('INCR', clock), id)
end
local function trim(rank, capacity, prefixes)
  local over = redis.call('ZCARD', rank) - capacity
  if over <= 0 then return {} end
  local dropped = redis.call('ZRANGE', rank, 0, over - 1)
  for _, old in ipairs(dropped) do
    for _, prefix in ipairs(prefixes) do redis.call('DEL', prefix .. old) end
  end
  redis.call('ZREMRANGEBYRANK', rank, 0, over - 1)
  return dropped
end
local function looked_up(key, rank, clock, id)
  local value = redis.call('GET', key)
  if not value then
    redis.call('ZREM', rank, id)
    return false
  end
  use(rank, clock, id)
  return value
end
"""


class RedisLink:
    def __init__(self, url: str, what: str, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url
        self._what = what  # the store, as the log names it
        self.client = redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            # A pooled connection that went stale (Redis restarted) fails once and is made anew:
            # the command is tried again at once on a fresh one. A timeout is not retried.
            retry=Retry(NoBackoff(), 1),
            retry_on_error=[RedisConnectionError],
        )
        self._down = False

    def script(self, source: str) -> AsyncScript:
        return self.client.register_script(source)

    async def call(self, command: Awaitable[T]) -> T:
        """The command's result; a 503 while Redis does not answer."""
        try:
            result = await command
        except RedisError as error:
            self.failed(error)
            raise APIError(
                503,
                f"The {self._what} is unavailable; try again shortly.",
                code="store_unavailable",
                error_type="server_error",
            ) from error
        self._up()
        return result

    async def attempt(self, command: Awaitable[T]) -> T | None:
        """The command's result; None when it did not go through (a failure is only logged)."""
        try:
            result = await command
        except RedisError as error:
            self.failed(error)
            return None
        self._up()
        return result

    def failed(self, error: RedisError) -> None:
        if not self._down:
            log.warning("the %s at %s is unavailable (%s)", self._what, self.url, error)
        self._down = True

    def _up(self) -> None:
        if self._down:
            log.info("the %s at %s answers again", self._what, self.url)
        self._down = False

    async def close(self) -> None:
        await self.client.aclose()

"""Orders among gateway replicas through a Redis stream (cancel a background response or a batch that
another replica runs): any replica adds one; each replica reads every order after the last it heard
and carries out those about what it runs. Orders given while a replica's connection was down are heard
once it is back (not those lost with a Redis that restarted)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from redis.exceptions import RedisError

from treespec.gateway.responses_api.redis_link import RedisLink

ORDERS_KEPT = 10_000  # about how many of the latest orders a stream keeps
READ_COUNT = 64
LISTEN_S = 1.0  # the listener's wait for an order per read (under the link's timeout)
RESUBSCRIBE_S = 1.0  # its wait after a failed read


class OrderStream:
    def __init__(self, link: RedisLink, key: str) -> None:
        self._link = link
        self.key = key

    async def send(self, fields: dict[str, str]) -> None:
        """Add an order; a 503 while Redis does not answer."""
        entry: dict[Any, Any] = dict(fields)
        await self._link.call(self._link.client.xadd(self.key, entry, maxlen=ORDERS_KEPT, approximate=True))

    async def entries(self) -> AsyncGenerator[dict[bytes, bytes], None]:
        """Every replica's orders (this one's too) from now on, as they come, forever."""
        last: bytes | str | None = None
        while True:
            try:
                if last is None:
                    last = await self._last()
                block_ms = int(LISTEN_S * 1000)
                reply: Any = await self._link.client.xread({self.key: last}, count=READ_COUNT, block=block_ms)
            except RedisError as error:
                self._link.failed(error)
                await asyncio.sleep(RESUBSCRIBE_S)
                continue
            found: list[tuple[bytes, dict[bytes, bytes]]] = reply[0][1] if reply else []
            for entry_id, fields in found:
                last = entry_id
                yield fields

    async def _last(self) -> bytes | str:
        newest: Any = await self._link.client.xrevrange(self.key, count=1)
        return newest[0][0] if newest else "0-0"

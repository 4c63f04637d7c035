"""Running an async test scenario on stores that hold connections, closing them after, whatever happens."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol


class Closable(Protocol):
    async def close(self) -> None: ...


def run_closing(scenario: Callable[..., Awaitable[Any]], *stores: Closable) -> Any:
    """`scenario(*stores)`'s result; every store closed after it."""

    async def closing() -> Any:
        try:
            return await scenario(*stores)
        finally:
            for store in stores:
                await store.close()

    return asyncio.run(closing())

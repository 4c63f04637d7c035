"""Where batches are told to the other gateway replicas: each batch's object (what GET /v1/batches/{id}
answers) as the replica running it last wrote it, and orders to cancel one. In a replica's memory
there is nothing to tell (`LocalBook`: every batch is its own); in Redis (redis_batches.py) every
replica reads, lists and cancels every batch, while the one that created it runs it."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Protocol


class BatchBook(Protocol):
    @property
    def shared(self) -> bool: ...

    async def put(self, body: dict[str, Any]) -> None:
        """Tell the batch's object (the running replica's own; a failure is only logged)."""

    async def get(self, batch_id: str) -> dict[str, Any] | None: ...

    async def listed(self) -> list[dict[str, Any]]:
        """Every batch's object, oldest first."""

    async def order_cancel(self, batch_id: str) -> None:
        """Ask the replica running it to cancel it."""

    def cancel_orders(self) -> AsyncGenerator[str, None]:
        """The ids of the batches any replica is asked to cancel, from now on."""

    async def close(self) -> None: ...


class LocalBook:
    """No other replica: nothing is written, read or ordered."""

    @property
    def shared(self) -> bool:
        return False

    async def put(self, body: dict[str, Any]) -> None:
        return None

    async def get(self, batch_id: str) -> dict[str, Any] | None:
        return None

    async def listed(self) -> list[dict[str, Any]]:
        return []

    async def order_cancel(self, batch_id: str) -> None:
        return None

    async def cancel_orders(self) -> AsyncGenerator[str, None]:
        return
        yield  # an async generator that yields nothing

    async def close(self) -> None:
        return None

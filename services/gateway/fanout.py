"""Several async iterators merged into one, in arrival order (the choices of one request).

Leaving the merged iterator early cancels every source, which closes them (and their gRPC calls).
The first source to fail ends the merge with its exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class _Item(Generic[T]):
    value: T


@dataclass(frozen=True)
class _Failed:
    error: BaseException


class _Done:
    pass


async def merge(sources: Sequence[AsyncGenerator[T, None]]) -> AsyncGenerator[T, None]:
    if len(sources) == 1:
        async with aclosing(sources[0]) as only:
            async for value in only:
                yield value
        return
    queue: asyncio.Queue[_Item[T] | _Failed | _Done] = asyncio.Queue()
    tasks = [asyncio.create_task(_pump(source, queue)) for source in sources]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if isinstance(item, _Done):
                remaining -= 1
            elif isinstance(item, _Failed):
                raise item.error
            else:
                yield item.value
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _pump(source: AsyncGenerator[T, None], queue: asyncio.Queue[_Item[T] | _Failed | _Done]) -> None:
    try:
        async with aclosing(source) as values:
            async for value in values:
                queue.put_nowait(_Item(value))
    except Exception as exc:
        queue.put_nowait(_Failed(exc))
    finally:
        queue.put_nowait(_Done())

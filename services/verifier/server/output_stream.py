"""The outputs of one submitted request, as an async iterator fed from the engine thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType

from treespec.verifier.request import RequestOutput


class OutputStream:
    """Yields a request's outputs in order; the last one carries the finish reason.

    Leaving early (cancellation while waiting, `aclose`, the `async with` block ending) releases the
    request: the engine aborts it and frees its KV. An engine failure is raised from `__anext__`.
    """

    def __init__(
        self,
        request_id: str,
        queue: asyncio.Queue[RequestOutput | BaseException],
        release: Callable[[], None],
    ) -> None:
        self.request_id = request_id
        self.num_output_tokens = 0
        self._queue = queue
        self._release = release
        self._done = False

    def __aiter__(self) -> OutputStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self._done:
            raise StopAsyncIteration
        try:
            item = await self._queue.get()
        except BaseException:  # cancelled: whoever waited for the tokens is gone
            self._let_go()
            raise
        if isinstance(item, BaseException):
            self._let_go()
            raise item
        self.num_output_tokens += len(item.token_ids)
        self._done = item.finished  # the engine has already let go of a finished request
        return item

    async def aclose(self) -> None:
        self._let_go()

    async def __aenter__(self) -> OutputStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._let_go()

    def _let_go(self) -> None:
        if not self._done:
            self._done = True
            self._release()

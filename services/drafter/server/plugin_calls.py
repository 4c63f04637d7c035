"""Where the drafter server runs its plugin's calls: on a worker thread of their own, or on the
server's event loop. Either way one thread makes the plugin and runs every call, so plugins need not
be thread-safe and the process keeps one OpenMP team (see DrafterServicer.build).

- `THREAD`: the event loop hands each call to the worker and awaits it. The server stays responsive
  while a call runs (other streams' messages are read, health checks answered), which suits a
  drafter replica serving many verifiers, or a plugin whose calls may wait (Redis).
- `LOOP`: calls run on the event loop itself. Each message then costs no hand-off between threads,
  which shortens a draft round trip (on 2 shared CPU cores, a few tenths of a millisecond of about 2;
  README, Co-location); a call holds up everything else of the server while it runs. For a
  co-located drafter, whose calls are bounded computations for the one verifier beside it.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class PluginCalls(enum.Enum):
    THREAD = "thread"
    LOOP = "loop"


class PluginRunner(Protocol):
    def make(self, make_plugin: Callable[[], T]) -> T:
        """Make the plugin on the thread that will run its calls."""
        ...

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Await `fn(*args)` on the plugin's thread (from the event loop)."""
        ...

    def submit(self, fn: Callable[[], object]) -> None:
        """Run `fn` on the plugin's thread without waiting for it (from the event loop)."""
        ...

    def shutdown(self) -> None:
        """Let submitted calls finish; no calls after this."""
        ...


class ThreadRunner:
    """Calls on one worker thread, which also makes the plugin."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drafter-plugin")

    def make(self, make_plugin: Callable[[], T]) -> T:
        try:
            return self._executor.submit(make_plugin).result()
        except BaseException:
            self._executor.shutdown(wait=False)
            raise

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def submit(self, fn: Callable[[], object]) -> None:
        self._executor.submit(fn)  # RuntimeError once shut down

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


class LoopRunner:
    """Calls on the event loop's thread; the plugin is made by the caller, on that thread."""

    def __init__(self) -> None:
        self._closed = False

    def make(self, make_plugin: Callable[[], T]) -> T:
        return make_plugin()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)

    def submit(self, fn: Callable[[], object]) -> None:
        if self._closed:
            raise RuntimeError("the plugin's calls are shut down")
        fn()

    def shutdown(self) -> None:
        self._closed = True


def plugin_runner(calls: PluginCalls) -> PluginRunner:
    return ThreadRunner() if calls is PluginCalls.THREAD else LoopRunner()

"""SGLang's POST /abort_request: stop generations by their `rid` (or all of them).

A /generate call registers each of its outputs' flags under the output's rid (and, for a prompt's
`n` choices, under the prompt's rid too, so that aborts all of them) while it runs; a chat or
completions request (as in SGLang) its choices' under its response's id and its request_id or rid
(run.py, abortable_events), so that a client may stop it by the id of its first streamed chunk or
by the name it gave it; those end with finish reason "abort". An abort sets
the flags; those outputs' events then stop (choice_abort.py: their verifier calls are cancelled, so
the verifier frees the requests) and they end with SGLang's `{"type": "abort"}` finish reason and
what they had, while the call's other outputs go on. An unknown rid is no error: the request may
have ended already, as SGLang answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class AbortTarget:
    """One output's flag and the rids that abort it."""

    rids: tuple[str, ...]
    flag: asyncio.Event


class AbortRegistry:
    """The running native generations' abort flags, by rid."""

    def __init__(self) -> None:
        self._flags: dict[str, set[asyncio.Event]] = {}

    def open(self, targets: Sequence[AbortTarget]) -> None:
        for target in targets:
            for rid in target.rids:
                self._flags.setdefault(rid, set()).add(target.flag)

    def close(self, targets: Sequence[AbortTarget]) -> None:
        for target in targets:
            for rid in target.rids:
                flags = self._flags.get(rid)
                if flags is not None:
                    flags.discard(target.flag)
                    if not flags:
                        del self._flags[rid]

    async def watch(
        self, events: AsyncGenerator[T, None], targets: Sequence[AbortTarget]
    ) -> AsyncGenerator[T, None]:
        """`events`, with `targets` registered while they are iterated."""
        self.open(targets)
        try:
            async with aclosing(events) as watched:
                async for value in watched:
                    yield value
        finally:
            self.close(targets)

    def abort(self, rid: str, abort_all: bool = False) -> int:
        """Set the flags of `rid`'s outputs (every output's with `abort_all`); how many outputs."""
        flags = {f for fs in self._flags.values() for f in fs} if abort_all else self._flags.get(rid, set())
        for flag in flags:
            flag.set()
        return len(flags)

"""A test plugin: the random drafter, with a log of what it was told and knobs to be slow or fail."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import Drafter, DraftQuery
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree


@dataclass(frozen=True)
class Call:
    method: str  # open, commit, close, propose
    key: str  # the id the plugin saw: "<stream>/<request id>" behind the server
    tokens: tuple[int, ...] = ()
    cache_salt: str = ""  # open's


class RecordingDrafter(Drafter):
    def __init__(self, vocab_size: int, seed: int = 0) -> None:
        self.inner = RandomTreeDrafter(vocab_size, seed=seed)
        self.propose_delay_s = 0.0  # sleep this long in the next propose
        self.fail_next_propose = False
        self.answering = threading.Event()  # cleared: every propose waits until it is set (a hung drafter)
        self.answering.set()
        self._calls: list[Call] = []
        self._lock = threading.Lock()
        self.made_on = threading.get_ident()
        self.called_on: set[int] = set()  # the threads its calls ran on

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        self._record(Call("open", request_id, tuple(prompt), cache_salt))
        self.inner.open(request_id, prompt, trace_context, cache_salt)

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        self._record(Call("commit", request_id, tuple(tokens)))
        self.inner.commit(request_id, tokens)

    def close(self, request_id: str) -> None:
        self._record(Call("close", request_id))
        self.inner.close(request_id)

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        for q in queries:
            self._record(Call("propose", q.request_id))
        delay, self.propose_delay_s = self.propose_delay_s, 0.0
        time.sleep(delay)
        self.answering.wait()
        if self.fail_next_propose:
            self.fail_next_propose = False
            raise RuntimeError("plugin failure")
        return self.inner.propose(queries)

    def calls(self, method: str, request_id: str | None = None) -> list[Call]:
        """Calls of `method`, for one request (by the id the verifier gave it) or all."""
        with self._lock:
            return [
                c
                for c in self._calls
                if c.method == method and (request_id is None or c.key.split("/", 1)[-1] == request_id)
            ]

    def _record(self, call: Call) -> None:
        with self._lock:
            self._calls.append(call)
            self.called_on.add(threading.get_ident())

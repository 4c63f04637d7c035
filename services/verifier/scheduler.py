"""Continuous batching: which requests run this step, with how many tokens, in which KV blocks."""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from treespec.shared.model.kv_cache import BlockAllocator, OutOfBlocksError
from treespec.shared.model.prefix_cache import PrefixCache
from treespec.verifier.state import Phase, RequestState

log = logging.getLogger(__name__)

PREEMPTION_LOG_EVERY = 50  # the first preemption is logged, then every this many (as vLLM does)


@dataclass(frozen=True)
class PrefillWork:
    state: RequestState
    length: int  # tokens[kv_len : kv_len + length] go through this forward

    @property
    def completes_prompt(self) -> bool:
        return self.state.kv_len + self.length == len(self.state.tokens)


@dataclass(frozen=True)
class ScheduledBatch:
    prefills: list[PrefillWork]
    decodes: list[RequestState]  # each reserved slots for its largest tree
    preempted: list[RequestState]

    @property
    def empty(self) -> bool:
        return not self.prefills and not self.decodes


@dataclass
class Scheduler:
    allocator: BlockAllocator
    block_size: int
    max_running: int
    chunk_tokens: int
    prefix_cache: PrefixCache | None = None  # None: every prompt is computed from its start
    by_priority: bool = False  # the priority policy: requests in order of priority, then arrival
    waiting: deque[RequestState] = field(default_factory=deque)
    running: list[RequestState] = field(default_factory=list)
    num_preemptions: int = 0  # since the start: requests whose K/V was dropped for lack of blocks

    def add(self, state: RequestState) -> None:
        self.waiting.append(state)

    def remove(self, state: RequestState) -> None:
        """Take a finished or aborted request out and return its blocks."""
        if state in self.running:
            self.running.remove(state)
        elif state in self.waiting:
            self.waiting.remove(state)
        self.release(state)

    def release(self, state: RequestState) -> None:
        """Return the request's blocks (its committed full blocks stay cached for later requests)."""
        self.cache_committed(state)
        self.allocator.free(state.blocks)
        state.blocks = []
        state.prefix_chain = []

    def cache_committed(self, state: RequestState) -> None:
        """Offer the request's full blocks of committed K/V to the prefix cache. (A request cut short
        by a stop token inside an accepted path has K/V past its last token: never offered.)"""
        if self.prefix_cache is not None and state.blocks:
            committed = min(state.kv_len, len(state.tokens))
            salt = state.request.cache_salt
            self.prefix_cache.register(state.tokens, state.blocks, committed, state.prefix_chain, salt)

    def trim(self, state: RequestState) -> None:
        """Free blocks past the committed K/V (the scratch slots of rejected tree nodes)."""
        keep = self._blocks_for(state.kv_len)
        if len(state.blocks) > keep:
            self.allocator.free(state.blocks[keep:])
            del state.blocks[keep:]

    def schedule(self) -> ScheduledBatch:
        preempted: list[RequestState] = []
        decodes = self._reserve_decodes(preempted)
        budget = self.chunk_tokens
        prefills: list[PrefillWork] = []
        for state in [s for s in self.running if s.in_prefill]:
            work = self._prefill_chunk(state, budget)
            if work is not None:
                prefills.append(work)
                budget -= work.length
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            state = self._next_waiting()
            found = self._reuse_prefix(state)
            work = self._prefill_chunk(state, budget)
            if work is None:
                self._unshare_prefix(state)
                break
            self.waiting.remove(state)
            if self.prefix_cache is not None:
                self.prefix_cache.record(len(state.tokens) - 1, found)
            if state.num_output == 0:
                state.cached_tokens = found
            state.phase = Phase.RUNNING
            self.running.append(state)
            prefills.append(work)
            budget -= work.length
        return ScheduledBatch(prefills, decodes, preempted)

    def _reserve_decodes(self, preempted: list[RequestState]) -> list[RequestState]:
        decodes: list[RequestState] = []
        for state in sorted((s for s in self.running if not s.in_prefill), key=self.order):
            if state.phase is not Phase.RUNNING:
                continue  # preempted earlier in this loop
            while not self._try_grow(state, state.kv_len + state.max_tree_nodes):
                victim = max(self.running, key=self.order)
                self._preempt(victim)
                preempted.append(victim)
                if victim is state:
                    break
            else:
                decodes.append(state)
        return [s for s in decodes if s.phase is Phase.RUNNING]

    def order(self, state: RequestState) -> tuple[int, int]:
        """Who goes first: admitted first, grown first, preempted last. First come, first served, or
        under the priority policy by priority (lower first) and then arrival."""
        return (state.request.priority if self.by_priority else 0, state.arrival)

    def _next_waiting(self) -> RequestState:
        """The waiting request to admit next: the first in line (preempted requests rejoin at its
        head), or under the priority policy the first in order."""
        return min(self.waiting, key=self.order) if self.by_priority else self.waiting[0]

    def _reuse_prefix(self, state: RequestState) -> int:
        """Start a request being admitted from the cached blocks of its longest cached prefix; the
        tokens found. Its last token is always computed (its logits are the next token's). A request
        that asked for its prompt's log-probabilities computes every prompt row."""
        cache = self.prefix_cache
        if cache is None or state.blocks:
            return 0
        if state.request.sampling.prompt_logprobs is not None:
            return 0
        state.blocks, state.prefix_chain = cache.match(
            state.tokens, len(state.tokens) - 1, state.request.cache_salt
        )
        state.kv_len = len(state.blocks) * self.block_size
        return state.kv_len

    def _unshare_prefix(self, state: RequestState) -> None:
        """A request that could not be admitted after all gives its shared blocks back."""
        if state.blocks:
            self.allocator.free(state.blocks)
            state.blocks, state.prefix_chain, state.kv_len = [], [], 0

    def _prefill_chunk(self, state: RequestState, budget: int) -> PrefillWork | None:
        length = min(state.prefill_remaining, budget)
        if length <= 0 or not self._try_grow(state, state.kv_len + length):
            return None
        return PrefillWork(state, length)

    def _try_grow(self, state: RequestState, num_slots: int) -> bool:
        need = self._blocks_for(num_slots) - len(state.blocks)
        if need <= 0:
            return True
        try:
            state.blocks += self.allocator.allocate(need)
        except OutOfBlocksError:
            return False
        return True

    def _preempt(self, state: RequestState) -> None:
        """Drop the request's K/V; it is recomputed from its tokens when it is admitted again."""
        self.running.remove(state)
        self.release(state)
        state.kv_len = 0
        state.phase = Phase.WAITING
        state.num_preemptions += 1
        self.waiting.appendleft(state)
        self.num_preemptions += 1
        if self.num_preemptions % PREEMPTION_LOG_EVERY == 1:
            log.warning(
                "request %s preempted: the KV cache ran out of blocks (%d in all), so its K/V is dropped "
                "and recomputed when it is admitted again; this slows decoding. %d preemptions so far. "
                "Raise --max-total-tokens, or lower --max-running-requests.",
                state.request_id,
                self.allocator.num_blocks,
                self.num_preemptions,
            )

    def _blocks_for(self, num_slots: int) -> int:
        return -(-num_slots // self.block_size)

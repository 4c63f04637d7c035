"""The n-gram drafter: trees from the request's own history and from a memory shared across replicas.

Per step and request: match the latest tokens against the request's prompt and output (an index
updated on every commit), add what followed the same n-grams in other requests (one batched memory
read for the whole step), merge the continuations into a trie and pick a tree (BFS or PROB), keeping
only nodes likely enough to be accepted. After commits, finished n-grams are queued for the memory;
the write happens in the background, never on the drafting path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from treespec.drafter.ngram.cache_salt import salt_marker, salted
from treespec.drafter.ngram.calibration import AcceptanceModel
from treespec.drafter.ngram.candidates import Candidate, from_local, from_memory
from treespec.drafter.ngram.config import NgramConfig
from treespec.drafter.ngram.history_index import RequestIndex
from treespec.drafter.ngram.memory import Context, MemoryConfig, NgramMemory
from treespec.drafter.ngram.memory_factory import open_memory
from treespec.drafter.ngram.namespace import memory_namespace
from treespec.drafter.ngram.observations import ObservationCursor
from treespec.drafter.ngram.outcomes import tree_outcomes
from treespec.drafter.ngram.tree_builder import DraftedTree, TreeShape, build_tree
from treespec.shared.drafting.drafter import Drafter, DrafterContext, DraftQuery
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree

log = logging.getLogger(__name__)

LOCAL_MATCH_LIMIT = 16  # earlier occurrences considered per step


@dataclass
class _Request:
    index: RequestIndex
    cursor: ObservationCursor
    acceptance: AcceptanceModel
    salt: Context = ()  # its contexts' prefix in the memory (cache_salt.py); () without a cache salt
    last_tree: DraftedTree | None = None


class NgramDrafter(Drafter):
    def __init__(self, config: NgramConfig, memory: NgramMemory) -> None:
        self.config = config
        self.memory = memory
        self.shape = TreeShape(
            config.match_type, config.min_bfs_breadth, config.max_bfs_breadth, config.min_path_prob
        )
        self.acceptance = AcceptanceModel()
        self._requests: dict[str, _Request] = {}

    @classmethod
    def create(cls, context: DrafterContext) -> NgramDrafter:
        config = NgramConfig.from_options(context.options)
        namespace = config.namespace or memory_namespace(
            context.target_path, context.vocab_size, config.tenant
        )
        memory_config = MemoryConfig(
            namespace=namespace,
            capacity=config.capacity,
            ttl_s=config.ttl_s,
            fanout=config.fanout,
            read_timeout_s=config.redis_timeout_ms / 1000.0,
        )
        where = config.redis_url or "in-process"
        log.info("n-gram drafter: memory %s, namespace %s, %s", where, namespace, config.as_options())
        return cls(config, open_memory(config.redis_url, memory_config))

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        c = self.config
        index = RequestIndex(c.min_match_window_size, c.max_match_window_size)
        index.extend(prompt)
        first_start = 0 if c.learn_from_prompts else len(prompt)
        cursor = ObservationCursor(
            first_start, c.min_match_window_size, c.max_match_window_size, c.branch_length
        )
        self._requests[request_id] = _Request(index, cursor, self.acceptance.child(), salt_marker(cache_salt))

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        request = self._requests[request_id]
        if request.last_tree is not None:
            request.acceptance.observe(tree_outcomes(request.last_tree, tokens))
            request.last_tree = None
        request.index.extend(tokens)
        self.memory.record(salted(request.salt, request.cursor.take(request.index.tokens, final=False)))

    def close(self, request_id: str) -> None:
        request = self._requests.pop(request_id, None)
        if request is not None:
            self.memory.record(salted(request.salt, request.cursor.take(request.index.tokens, final=True)))

    def shutdown(self) -> None:
        self.memory.close()

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        requests = [self._requests[q.request_id] for q in queries]
        remembered = self._remembered(requests)
        trees: list[TokenTree | None] = []
        for query, request, memory_candidates in zip(queries, requests, remembered, strict=True):
            drafted = self._draft(query, request, memory_candidates)
            request.last_tree = drafted
            trees.append(drafted.tree if drafted is not None else None)
        return trees

    def _draft(self, query: DraftQuery, request: _Request, remembered: list[Candidate]) -> DraftedTree | None:
        length = min(self.config.branch_length, query.budget.num_steps)
        local = from_local(request.index.matches(length, LOCAL_MATCH_LIMIT))
        root = request.index.tokens[-1]
        return build_tree(root, local + remembered, query.budget, self.shape, request.acceptance.probability)

    def _remembered(self, requests: Sequence[_Request]) -> list[list[Candidate]]:
        """One memory read for the whole batch: every request's suffix windows (under its salt)."""
        windows = [self._windows(len(r.index.tokens)) for r in requests]
        contexts: list[Context] = [
            r.salt + tuple(r.index.tokens[-w:]) for r, ws in zip(requests, windows, strict=True) for w in ws
        ]
        results = self.memory.lookup(contexts) if contexts else []
        out: list[list[Candidate]] = []
        offset = 0
        for ws in windows:
            out.append(from_memory(ws, results[offset : offset + len(ws)]))
            offset += len(ws)
        return out

    def _windows(self, history_length: int) -> list[int]:
        top = min(self.config.max_match_window_size, history_length)
        return list(range(top, self.config.min_match_window_size - 1, -1))

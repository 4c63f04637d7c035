"""The requests one Draft stream opened, and the plugin calls made for them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from treespec.drafter.server.spans import RequestSpans
from treespec.shared.drafting.drafter import Drafter, DraftQuery, salt_argument
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.warn_once import WarnOnce

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProposalItem:
    """One request of a Propose; `budget` is None when the message's budget was invalid."""

    request_id: str
    budget: TreeBudget | None


@dataclass(frozen=True)
class Proposal:
    """The answer for one item: a tree, nothing (plain decoding), or an error."""

    request_id: str
    tree: TokenTree | None = None
    error: str = ""


class DraftSession:
    """Request ids are unique per verifier only, so the plugin sees them prefixed by the stream's
    number. Every method runs on the plugin thread, which alone touches this state (no locks)."""

    def __init__(self, plugin: Drafter, spans: RequestSpans, stream_id: int) -> None:
        self._plugin = plugin
        self._spans = spans
        self._prefix = f"{stream_id}/"
        self._open: set[str] = set()
        self._warn_once = WarnOnce(log)

    def key(self, request_id: str) -> str:
        return self._prefix + request_id

    def open(
        self,
        request_id: str,
        token_ids: Sequence[int],
        trace_context: Mapping[str, str],
        cache_salt: str = "",
    ) -> None:
        """Also a reopen: a request this stream already tracks starts over from `token_ids`."""
        if request_id in self._open:
            self.close(request_id)
        if not token_ids:
            self._warn_once("empty", f"ignoring Open of {request_id!r} without tokens")
            return
        key = self.key(request_id)
        if self._call("open", key, list(token_ids), dict(trace_context), *salt_argument(cache_salt)):
            self._open.add(request_id)
            self._spans.start(key, request_id, trace_context)

    def advance(
        self, request_id: str, token_ids: Sequence[int], features: FeatureSlots | None = None
    ) -> None:
        """`features`: where a co-located plugin finds the target's features of the new positions."""
        if request_id in self._open and token_ids:
            extra = () if features is None else (features,)
            self._call("commit", self.key(request_id), list(token_ids), *extra)

    def close(self, request_id: str) -> None:
        if request_id in self._open:
            self._open.discard(request_id)
            key = self.key(request_id)
            self._call("close", key)
            self._spans.end(key)

    def close_all(self) -> None:
        """The stream ended (the verifier is gone): nobody will close its requests but us."""
        for request_id in list(self._open):
            self.close(request_id)

    def propose(self, items: Sequence[ProposalItem]) -> list[Proposal]:
        wanted = [i for i in items if i.request_id in self._open and i.budget is not None]
        try:
            trees = self._trees(wanted)
        except Exception as exc:  # the stream outlives a failing plugin; that step decodes plainly
            self._warn_once("propose", f"drafter propose failed: {exc!r}")
            return [Proposal(i.request_id, error=f"drafter failed: {exc!r}") for i in items]
        answers = {i.request_id: Proposal(i.request_id, tree) for i, tree in zip(wanted, trees, strict=True)}
        for request_id, proposal in answers.items():
            self._spans.record(self.key(request_id), proposal.tree)
        return [answers.get(i.request_id) or _rejected(i) for i in items]

    def _trees(self, wanted: Sequence[ProposalItem]) -> list[TokenTree | None]:
        """One entry per item: a plugin that answers too few (or too many) is padded (or cut)."""
        queries = [DraftQuery(self.key(i.request_id), i.budget) for i in wanted if i.budget is not None]
        if not queries:
            return []
        trees = list(self._plugin.propose(queries))
        return (trees + [None] * len(queries))[: len(queries)]

    def _call(self, method: str, *args: object) -> bool:
        try:
            getattr(self._plugin, method)(*args)
        except Exception as exc:  # a plugin's trouble with one request must not end the stream
            self._warn_once(method, f"drafter {method} failed: {exc!r}")
            return False
        return True


def _rejected(item: ProposalItem) -> Proposal:
    reason = "invalid budget" if item.budget is None else "unknown request id"
    return Proposal(item.request_id, error=f"{reason}: {item.request_id!r}")

"""One span per drafted request, from Open to Close, in the request's own trace."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry import propagate, trace

from treespec.shared.drafting.token_tree import TokenTree

SPAN_NAME = "draft"
KIND_ATTRIBUTE = "treespec.drafter.kind"
REQUEST_ATTRIBUTE = "treespec.request.id"
PROPOSALS_ATTRIBUTE = "treespec.draft.proposals"
TOKENS_ATTRIBUTE = "treespec.draft.tokens"


@dataclass
class _Open:
    span: trace.Span
    proposals: int = 0  # trees proposed
    tokens: int = 0  # draft tokens in them, roots excluded


class RequestSpans:
    """Speculation figures are attributes of the request's span, not spans per step (one step is
    milliseconds; a span each would swamp the trace). Not thread-safe: the plugin thread owns it."""

    def __init__(self, tracer: trace.Tracer, kind: str) -> None:
        self._tracer = tracer
        self._kind = kind
        self._open: dict[str, _Open] = {}

    def start(self, key: str, request_id: str, trace_context: Mapping[str, str]) -> None:
        """`trace_context`: the W3C headers the verifier forwarded; empty starts a new trace."""
        self.end(key)
        parent = propagate.extract(dict(trace_context))
        span = self._tracer.start_span(
            SPAN_NAME,
            context=parent,
            attributes={KIND_ATTRIBUTE: self._kind, REQUEST_ATTRIBUTE: request_id},
        )
        self._open[key] = _Open(span)

    def record(self, key: str, tree: TokenTree | None) -> None:
        entry = self._open.get(key)
        if entry is not None and tree is not None:
            entry.proposals += 1
            entry.tokens += tree.num_nodes - 1

    def end(self, key: str) -> None:
        entry = self._open.pop(key, None)
        if entry is None:
            return
        entry.span.set_attribute(PROPOSALS_ATTRIBUTE, entry.proposals)
        entry.span.set_attribute(TOKENS_ATTRIBUTE, entry.tokens)
        entry.span.end()

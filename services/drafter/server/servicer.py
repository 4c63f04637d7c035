"""The Drafter gRPC service: one plugin instance behind the bidirectional Draft stream."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Callable

import grpc
from opentelemetry import trace

from treespec.drafter.server.plugin_calls import PluginCalls, PluginRunner, plugin_runner
from treespec.drafter.server.session import DraftSession, Proposal, ProposalItem
from treespec.drafter.server.spans import RequestSpans
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.rpc.tree_codec import budget_from_proto, tree_to_proto
from treespec.shared.telemetry.tracing import TRACER_NAME
from treespec.v1 import drafter_pb2, drafter_pb2_grpc

log = logging.getLogger(__name__)


class DrafterServicer(drafter_pb2_grpc.DrafterServicer):
    """Messages of a stream are handled in order. Plugin calls are synchronous and may be heavy; all
    streams' calls run on one thread (plugin_calls.py): a worker of their own, or the event loop.
    A stream awaits each call before reading its next message."""

    def __init__(self, plugin: Drafter, kind: str, tracer: trace.Tracer | None, runner: PluginRunner) -> None:
        """Use `build`: `runner` runs the plugin's calls on the thread that made it."""
        self._plugin = plugin
        self._spans = RequestSpans(tracer or trace.get_tracer(TRACER_NAME), kind)
        self._runner = runner
        self._stream_ids = itertools.count(1)

    @classmethod
    def build(
        cls,
        make_plugin: Callable[[], Drafter],
        kind: str,
        tracer: trace.Tracer | None = None,
        calls: PluginCalls = PluginCalls.THREAD,
    ) -> DrafterServicer:
        """A servicer whose plugin is made on the thread that will run it, so that one thread of the
        process does all its torch work: every thread that runs torch's parallel operations keeps an
        OpenMP thread team of its own, and with more such threads than cores libgomp throttles its
        spin-waits, which slows every product (see VerifierServer.prepare). With `PluginCalls.LOOP`
        that thread is the caller's: build it on the thread that will run the server's event loop."""
        runner = plugin_runner(calls)
        return cls(runner.make(make_plugin), kind, tracer, runner)

    async def Draft(
        self, request_iterator: AsyncIterator[drafter_pb2.DraftRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[drafter_pb2.DraftReply]:
        session = self.session()
        # However the stream ends (half-close, cancel, broken connection), its requests are closed;
        # close_all is idempotent, so both paths may run it.
        context.add_done_callback(lambda _: self.end(session))
        try:
            async for message in request_iterator:
                reply = await self.handle(session, message)
                if reply is not None:
                    yield reply
        finally:
            self.end(session)

    def session(self) -> DraftSession:
        """A new stream's requests (the gRPC Draft stream, or a local socket's: local_server.py)."""
        return DraftSession(self._plugin, self._spans, next(self._stream_ids))

    def end(self, session: DraftSession) -> None:
        """The stream ended: its requests are closed on the plugin's thread (idempotent)."""
        self._submit(session.close_all)

    def shutdown(self) -> None:
        """After the server stopped: let the queued closes run, end the plugin's calls, then the plugin."""
        self._runner.shutdown()
        self._plugin.shutdown()

    async def handle(
        self, session: DraftSession, message: drafter_pb2.DraftRequest
    ) -> drafter_pb2.DraftReply | None:
        """One message of a stream, in the stream's order; a Propose is answered."""
        kind = message.WhichOneof("message")
        if kind == "open":
            m = message.open
            await self._runner.run(
                session.open, m.request_id, list(m.token_ids), dict(m.trace_context), m.cache_salt
            )
        elif kind == "advance":
            m = message.advance
            await self._runner.run(session.advance, m.request_id, list(m.token_ids), _features(m))
        elif kind == "close":
            await self._runner.run(session.close, message.close.request_id)
        elif kind == "propose":
            items = [_item(i) for i in message.propose.items]
            proposals = await self._runner.run(session.propose, items)
            return drafter_pb2.DraftReply(
                round=message.propose.round, results=[_result(p) for p in proposals]
            )
        return None

    def _submit(self, fn: Callable[[], object]) -> None:
        try:
            self._runner.submit(fn)
        except RuntimeError:  # shut down already: the process is exiting
            log.debug("plugin calls shut down; skipping stream clean-up")


def _features(message: drafter_pb2.AdvanceDraft) -> FeatureSlots | None:
    if not message.HasField("features"):
        return None
    return FeatureSlots(message.features.start, tuple(message.features.slots))


def _item(message: drafter_pb2.ProposeItem) -> ProposalItem:
    try:
        return ProposalItem(message.request_id, budget_from_proto(message.budget))
    except ValueError:
        return ProposalItem(message.request_id, None)


def _result(proposal: Proposal) -> drafter_pb2.DraftResult:
    result = drafter_pb2.DraftResult(request_id=proposal.request_id, error=proposal.error)
    if proposal.tree is not None:
        try:
            result.tree.CopyFrom(tree_to_proto(proposal.tree))
        except (ValueError, TypeError) as exc:  # e.g. a negative token id does not fit uint32
            result.ClearField("tree")
            result.error = f"unencodable tree: {exc}"
    return result

"""The drafter service over real sockets: the server, the verifier's RemoteDrafter, fail-over."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.services.recording_drafter import RecordingDrafter
from treespec.drafter.server.app import DrafterServer
from treespec.drafter.server.plugin_calls import PluginCalls
from treespec.kernels.tree_mask import validate_tree
from treespec.shared.cli.drafter import read_vocab_size
from treespec.shared.cli.plugin_flags import parse_options
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.drafting.token_tree import TreeBudget
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.rpc.tree_codec import budget_to_proto
from treespec.v1 import drafter_pb2, drafter_pb2_grpc
from treespec.verifier.config import EngineConfig
from treespec.verifier.drafter_targets import DrafterTargets
from treespec.verifier.engine import Engine
from treespec.verifier.remote_drafter import RemoteDrafter
from treespec.verifier.replica_pace import PacePolicy
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

VOCAB = 97
PROMPTS = [[(7 * i + 3 * j) % VOCAB for j in range(5 + 3 * i)] for i in range(6)]
BUDGET = TreeBudget(num_draft_tokens=8, num_steps=5, topk=4)


@contextmanager
def serving(
    plugin: RecordingDrafter | Callable[[], RecordingDrafter], port: int = 0, **kw: Any
) -> Iterator[tuple[DrafterServer, str]]:
    server = DrafterServer(plugin, "random", port=port, **kw)
    bound = server.start()
    try:
        yield server, f"127.0.0.1:{bound}"
    finally:
        server.stop(0)


@contextmanager
def remote(targets: list[str] | str, deadline_s: float = 5.0, replicas: int = 1) -> Iterator[RemoteDrafter]:
    with RemoteDrafter(targets, deadline_s) as drafter:
        assert drafter.wait_for_replicas(replicas, 5.0)
        yield drafter


def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.01)
    return check()


def make_engine(path: Path, model: CausalLM, drafter: RemoteDrafter | None = None) -> Engine:
    return Engine(EngineConfig(model_path=path, page_size=4, max_total_tokens=2048), drafter, model)


def greedy(i: int, n: int = 24, spec: bool = True) -> GenerationRequest:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n, ignore_eos=True)
    return GenerationRequest(f"r{i}", PROMPTS[i], sampling, SpeculationParams(enabled=spec))


def plain(path: Path, model: CausalLM, n: int) -> dict[str, list[int]]:
    got = make_engine(path, model).generate(greedy(i, n, spec=False) for i in range(len(PROMPTS)))
    return {k: v.token_ids for k, v in got.items()}


def run_steps(engine: Engine, tokens: dict[str, list[int]], steps: int | None = None) -> None:
    """Step the engine `steps` times (None: until it is idle), collecting output tokens."""
    for _ in range(steps) if steps is not None else iter(int, 1):
        if not engine.has_work():
            return
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.token_ids)


# ---- the client against one server ------------------------------------------------------------


@pytest.mark.parametrize("local", [False, True], ids=["grpc", "local-socket"])
@pytest.mark.parametrize("calls", list(PluginCalls))
def test_remote_trees_respect_budget_and_root(calls: PluginCalls, local: bool, tmp_path: Path) -> None:
    """Over gRPC, or over a co-located drafter's local socket (test_local_draft_link.py); the plugin
    learns each request's cache salt."""
    socket = tmp_path / "draft.sock"
    plugin = RecordingDrafter(VOCAB)
    with (
        serving(plugin, calls=calls, local_socket=socket if local else None) as (_, address),
        remote([f"local:{socket}" if local else address]) as drafter,
    ):
        drafter.open("r0", [1, 2, 3], cache_salt="tenant-a")
        drafter.open("r1", [1, 2])
        drafter.commit("r0", [4, 5])
        tree, missing = drafter.propose([DraftQuery("r0", BUDGET), DraftQuery("never-opened", BUDGET)])
        assert tree is not None and missing is None
        assert int(tree.tokens[0]) == 5
        problem = validate_tree(
            tree.tokens, tree.parents, tree.probs, vocab_size=VOCAB, max_nodes=8, max_depth=5, max_children=4
        )
        assert problem is None and tree.num_nodes == 8
        opened = plugin.calls("open", "r0") + plugin.calls("open", "r1")
        assert [c.cache_salt for c in opened] == ["tenant-a", ""]


def test_a_second_server_on_a_port_in_use_fails_rather_than_sharing_it() -> None:
    with serving(RecordingDrafter(VOCAB)) as (_, address):
        second = DrafterServer(RecordingDrafter(VOCAB), "random", port=int(address.rsplit(":", 1)[1]))
        try:
            with pytest.raises(OSError, match="cannot listen"):
                second.start()
        finally:
            second.stop(0)


def test_dns_target_resolves_to_the_replica() -> None:
    with serving(RecordingDrafter(VOCAB)) as (_, address):
        port = address.rsplit(":", 1)[1]
        assert address in DrafterTargets.parse(f"dns:///localhost:{port}").resolve()
        with remote(f"dns:///localhost:{port}") as drafter:
            assert address in drafter.live_replicas()


def test_engine_with_remote_drafter_is_lossless(tiny_path: Path, tiny_model: CausalLM) -> None:
    want = plain(tiny_path, tiny_model, 24)
    plugin = RecordingDrafter(VOCAB, seed=3)
    with serving(plugin) as (_, address), remote([address]) as drafter:
        engine = make_engine(tiny_path, tiny_model, drafter)
        got = engine.generate(greedy(i) for i in range(len(PROMPTS)))
        assert {k: v.token_ids for k, v in got.items()} == want
        assert engine.stats.drafted_tokens > 0
        assert eventually(lambda: len(plugin.calls("close")) == len(PROMPTS))


def test_late_reply_means_no_tree_and_is_dropped_later() -> None:
    plugin = RecordingDrafter(VOCAB)
    with serving(plugin) as (_, address), remote([address], deadline_s=0.1) as drafter:
        drafter.open("r0", [1, 2, 3])
        plugin.propose_delay_s = 0.5
        start = time.monotonic()
        assert drafter.propose([DraftQuery("r0", BUDGET)]) == [None]
        assert time.monotonic() - start < 0.1 + 0.2
        # The next round is asked while the late reply (an 8-node tree) is still on its way.
        drafter.deadline_s = 5.0
        (tree,) = drafter.propose([DraftQuery("r0", TreeBudget(num_draft_tokens=2, num_steps=1, topk=1))])
        assert tree is not None and tree.num_nodes == 2 and int(tree.tokens[0]) == 3


# ---- several replicas ----------------------------------------------------------------------------


def test_requests_spread_and_survive_a_replica_going_away(tiny_path: Path, tiny_model: CausalLM) -> None:
    want = plain(tiny_path, tiny_model, 40)
    plugin_a, plugin_b = RecordingDrafter(VOCAB, seed=1), RecordingDrafter(VOCAB, seed=2)
    with (
        serving(plugin_a) as (server_a, address_a),
        serving(plugin_b) as (_, address_b),
        remote([address_a, address_b], replicas=2) as drafter,
    ):
        engine = make_engine(tiny_path, tiny_model, drafter)
        for i in range(len(PROMPTS)):
            engine.add_request(greedy(i, 40))
        tokens: dict[str, list[int]] = {}
        run_steps(engine, tokens, steps=4)
        placement = {f"r{i}": drafter.replica_of(f"r{i}") for i in range(len(PROMPTS))}
        assert set(placement.values()) == {address_a, address_b}

        server_a.stop(0)
        assert eventually(lambda: drafter.live_replicas() == [address_b])
        moved = [rid for rid, where in placement.items() if where == address_a]
        assert all(drafter.replica_of(rid) == address_b for rid in moved)
        run_steps(engine, tokens)
        assert tokens == want
        for rid in moved:  # reopened on B from the prompt and every token committed before the move
            (reopen,) = plugin_b.calls("open", rid)
            prompt = PROMPTS[int(rid[1:])]
            assert len(prompt) < len(reopen.tokens) < len(prompt) + len(want[rid])
            assert list(reopen.tokens) == (prompt + want[rid])[: len(reopen.tokens)]

        plugin_a2 = RecordingDrafter(VOCAB, seed=4)
        with serving(plugin_a2, port=int(address_a.rsplit(":", 1)[1])):
            assert drafter.wait_for_replicas(2, 10.0)
            again = make_engine(tiny_path, tiny_model, drafter)
            got = again.generate(greedy(i, 40) for i in range(2))
            assert {k: v.token_ids for k, v in got.items()} == {k: want[k] for k in got}
            assert len(plugin_a2.calls("open")) == 1 and plugin_a2.calls("propose")


def _timed_propose(drafter: RemoteDrafter, *rids: str) -> tuple[list[bool], float]:
    """Which of `rids` got a tree this round, and how long the round took."""
    start = time.monotonic()
    trees = drafter.propose([DraftQuery(rid, BUDGET) for rid in rids])
    return [tree is not None for tree in trees], time.monotonic() - start


def test_a_hung_replica_is_not_waited_on_until_it_answers_in_time_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A replica that holds its stream but answers nothing would cost every step the whole deadline."""
    caplog.set_level(logging.INFO, logger="treespec.verifier.replica_pace")
    plugin = RecordingDrafter(VOCAB)
    pace = PacePolicy(miss_limit=3)
    with serving(plugin) as (_, address), RemoteDrafter([address], 0.1, pace=pace) as drafter:
        assert drafter.wait_for_replicas(1, 5.0)
        drafter.open("r0", [1, 2, 3])
        assert _timed_propose(drafter, "r0")[0] == [True]
        plugin.answering.clear()
        try:
            for _ in range(3):  # each missed round costs the deadline
                got, seconds = _timed_propose(drafter, "r0")
                assert got == [False] and seconds >= 0.1
            for _ in range(5):  # then the replica is not waited on
                got, seconds = _timed_propose(drafter, "r0")
                assert got == [False] and seconds < 0.05
        finally:
            plugin.answering.set()
        # The probe sent while it hung is answered late; the next one in time: every round waits again.
        assert eventually(lambda: _timed_propose(drafter, "r0")[0] == [True])
        assert all(_timed_propose(drafter, "r0")[0] == [True] for _ in range(5))
    messages = [r.getMessage() for r in caplog.records]
    assert sum("missed the draft deadline 3 rounds in a row" in m for m in messages) == 1
    assert sum("answers in time again" in m for m in messages) == 1


def test_requests_of_a_hung_replica_move_to_one_that_keeps_pace() -> None:
    plugin_a, plugin_b = RecordingDrafter(VOCAB, seed=1), RecordingDrafter(VOCAB, seed=2)
    pace = PacePolicy(miss_limit=2)
    with (
        serving(plugin_a) as (_, address_a),
        serving(plugin_b) as (_, address_b),
        RemoteDrafter([address_a, address_b], 0.1, pace=pace) as drafter,
    ):
        assert drafter.wait_for_replicas(2, 5.0)
        rids = [f"r{i}" for i in range(4)]
        for rid in rids:
            drafter.open(rid, [1, 2, 3])
        on_a = [rid for rid in rids if drafter.replica_of(rid) == address_a]
        assert on_a and len(on_a) < len(rids)
        plugin_a.answering.clear()
        try:
            for _ in range(2):
                got, _ = _timed_propose(drafter, *rids)
                assert got == [rid not in on_a for rid in rids]
            assert all(drafter.replica_of(rid) == address_b for rid in rids)
            got, seconds = _timed_propose(drafter, *rids)
            assert got == [True] * len(rids) and seconds < 0.1
            for rid in on_a:  # reopened on B
                assert len(plugin_b.calls("open", rid)) == 1
            new = "r-new"  # new requests go to the replica that keeps pace too
            drafter.open(new, [4, 5])
            assert drafter.replica_of(new) == address_b
        finally:
            plugin_a.answering.set()
        assert eventually(lambda: all(len(plugin_a.calls("close", rid)) == 1 for rid in on_a))


def test_no_replica_reachable_means_plain_decoding() -> None:
    with serving(RecordingDrafter(VOCAB)) as (server, address):
        server.stop(0)
    with RemoteDrafter([address], deadline_s=0.05) as drafter:
        drafter.open("r0", [1, 2])
        drafter.commit("r0", [3])
        assert drafter.propose([DraftQuery("r0", BUDGET)]) == [None]
        drafter.close("r0")


# ---- the server, spoken to directly ---------------------------------------------------------------


class RawStream:
    """A Draft stream fed by hand."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._outbox: queue.SimpleQueue[drafter_pb2.DraftRequest | None] = queue.SimpleQueue()
        self.call = drafter_pb2_grpc.DrafterStub(channel).Draft(iter(self._outbox.get, None))

    def open(
        self, rid: str, tokens: list[int], trace_context: dict[str, str] | None = None, cache_salt: str = ""
    ) -> None:
        message = drafter_pb2.OpenDraft(
            request_id=rid, token_ids=tokens, trace_context=trace_context or {}, cache_salt=cache_salt
        )
        self._outbox.put(drafter_pb2.DraftRequest(open=message))

    def close(self, rid: str) -> None:
        self._outbox.put(drafter_pb2.DraftRequest(close=drafter_pb2.CloseDraft(request_id=rid)))

    def propose(self, round_: int, *rids: str) -> drafter_pb2.DraftReply:
        items = [drafter_pb2.ProposeItem(request_id=r, budget=budget_to_proto(BUDGET)) for r in rids]
        self._outbox.put(
            drafter_pb2.DraftRequest(propose=drafter_pb2.ProposeDrafts(round=round_, items=items))
        )
        reply: drafter_pb2.DraftReply = next(self.call)
        assert reply.round == round_
        return reply


@pytest.mark.parametrize("calls", list(PluginCalls))
def test_a_plugin_made_by_the_server_is_made_and_called_on_one_thread(calls: PluginCalls) -> None:
    """All of a drafter process's torch work on one thread (DrafterServicer.build): each thread that
    runs torch's parallel operations keeps an OpenMP team, and more teams than cores slow them all.
    That thread is a worker of its own (THREAD) or the one running the server's event loop (LOOP)."""
    made: list[RecordingDrafter] = []

    def make() -> RecordingDrafter:
        made.append(RecordingDrafter(VOCAB))
        return made[-1]

    with serving(make, calls=calls) as (_, address), grpc.insecure_channel(address) as channel:
        stream = RawStream(channel)
        stream.open("a", [4, 5, 6])
        (reply,) = stream.propose(1, "a").results
        assert reply.HasField("tree")
        stream.close("a")
        stream.propose(2, "a")  # answered after the close was handled
        names = {thread.ident: thread.name for thread in threading.enumerate()}
    (plugin,) = made
    assert plugin.made_on != threading.get_ident()
    assert plugin.called_on == {plugin.made_on}
    assert [len(plugin.calls(m)) for m in ("open", "propose", "close")] == [1, 1, 1]
    expected = "drafter-server" if calls is PluginCalls.LOOP else "drafter-plugin"
    assert names[plugin.made_on].startswith(expected)


def test_unknown_request_and_plugin_failure_are_reported_per_result() -> None:
    plugin = RecordingDrafter(VOCAB)
    with serving(plugin) as (_, address), grpc.insecure_channel(address) as channel:
        stream = RawStream(channel)
        (ghost,) = stream.propose(1, "ghost").results
        assert ghost.request_id == "ghost" and ghost.error and not ghost.HasField("tree")
        stream.open("a", [4, 5, 6])
        plugin.fail_next_propose = True
        (failed,) = stream.propose(2, "a").results
        assert "plugin failure" in failed.error and not failed.HasField("tree")
        (ok,) = stream.propose(3, "a").results
        assert ok.HasField("tree") and ok.tree.tokens[0] == 6 and not ok.error


class LegacyDrafter(RecordingDrafter):
    """A plugin written before `open` took a cache salt."""

    def open(  # type: ignore[override]
        self, request_id: str, prompt: Sequence[int], trace_context: Mapping[str, str] | None = None
    ) -> None:
        super().open(request_id, prompt, trace_context)


def test_a_plugin_without_the_cache_salt_drafts_for_unsalted_requests_only() -> None:
    """Unaware of salts, it could mix a salted request's text with others': that request fails to
    open there (plain decoding for it) while every other request is drafted for as before."""
    plugin = LegacyDrafter(VOCAB)
    with serving(plugin) as (_, address), grpc.insecure_channel(address) as channel:
        stream = RawStream(channel)
        stream.open("plain", [4, 5, 6])
        stream.open("salted", [4, 5, 6], cache_salt="tenant-a")
        plain, salted = stream.propose(1, "plain", "salted").results
        assert plain.HasField("tree") and not plain.error
        assert salted.error and not salted.HasField("tree")


@pytest.mark.parametrize("calls", list(PluginCalls))
def test_requests_of_a_vanished_client_are_closed(calls: PluginCalls) -> None:
    plugin = RecordingDrafter(VOCAB)
    with serving(plugin, calls=calls) as (_, address), grpc.insecure_channel(address) as channel:
        first, second = RawStream(channel), RawStream(channel)
        for stream in (first, second):  # request ids are per verifier: the same id twice is fine
            stream.open("a", [1, 2])
        first.open("b", [3])
        assert [r.HasField("tree") for r in first.propose(1, "a", "b").results] == [True, True]
        assert second.propose(1, "a").results[0].HasField("tree")
        first.call.cancel()
        assert eventually(lambda: {c.key.split("/")[1] for c in plugin.calls("close")} == {"a", "b"})
        assert len(plugin.calls("close")) == 2  # the second stream's "a" stays open
        assert len(plugin.called_on) == 1  # the closes too ran on the plugin's one thread
        assert second.propose(2, "a").results[0].HasField("tree")


def test_a_draft_span_per_request_in_the_callers_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    traceparent = {"traceparent": f"00-{trace_id}-{parent_id}-01"}
    plugin = RecordingDrafter(VOCAB)
    tracer = provider.get_tracer("test")
    with serving(plugin, tracer=tracer) as (_, address), grpc.insecure_channel(address) as channel:
        stream = RawStream(channel)
        stream.open("a", [1, 2, 3], traceparent)
        trees = [stream.propose(n, "a").results[0].tree for n in (1, 2)]
        stream.close("a")
        stream.propose(3, "a")  # answered after the close was handled
    (span,) = exporter.get_finished_spans()
    assert span.name == "draft" and span.parent is not None
    assert f"{span.context.trace_id:032x}" == trace_id and f"{span.parent.span_id:016x}" == parent_id
    assert span.attributes is not None
    assert span.attributes["treespec.drafter.kind"] == "random"
    assert span.attributes["treespec.draft.proposals"] == 2
    assert span.attributes["treespec.draft.tokens"] == sum(len(t.tokens) - 1 for t in trees)


# ---- the command line -------------------------------------------------------------------------------


def test_cli_options_and_vocab_size(tiny_path: Path) -> None:
    assert parse_options(["seed=3", "with_probs=true", "name=x=y"]) == {
        "seed": 3,
        "with_probs": True,
        "name": "x=y",
    }
    with pytest.raises(ValueError):
        parse_options(["novalue"])
    assert read_vocab_size(tiny_path) == VOCAB

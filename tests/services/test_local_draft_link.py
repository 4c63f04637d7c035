"""The Draft stream over a co-located drafter's local socket (`--local-socket PATH` on the drafter,
`local:PATH` on the verifier): the same messages as over gRPC, in frames on a private Unix socket."""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.services.recording_drafter import RecordingDrafter
from tests.services.test_drafter_service import (
    BUDGET,
    PROMPTS,
    VOCAB,
    eventually,
    greedy,
    make_engine,
    plain,
    remote,
)
from treespec.drafter.server.app import DrafterServer
from treespec.drafter.server.plugin_calls import PluginCalls
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.rpc.frames import HEADER, MAX_FRAME_BYTES, frame, recv_frame
from treespec.shared.rpc.private_socket import SocketInUseError
from treespec.v1 import drafter_pb2
from treespec.verifier.drafter_targets import DrafterTargets
from treespec.verifier.remote_drafter import RemoteDrafter


@contextmanager
def serving_locally(plugin: RecordingDrafter, path: Path, **kw: Any) -> Iterator[DrafterServer]:
    server = DrafterServer(plugin, "random", local_socket=path, **kw)
    server.start()
    try:
        yield server
    finally:
        server.stop(0)


def test_the_engine_over_a_local_link_is_lossless_and_closes_its_requests(
    tmp_path: Path, tiny_path: Path, tiny_model: CausalLM
) -> None:
    want = plain(tiny_path, tiny_model, 24)
    plugin = RecordingDrafter(VOCAB, seed=3)
    path = tmp_path / "draft.sock"
    with serving_locally(plugin, path, calls=PluginCalls.LOOP), remote([f"local:{path}"]) as drafter:
        engine = make_engine(tiny_path, tiny_model, drafter)
        got = engine.generate(greedy(i) for i in range(len(PROMPTS)))
        assert {k: v.token_ids for k, v in got.items()} == want
        assert engine.stats.drafted_tokens > 0
        assert eventually(lambda: len(plugin.calls("close")) == len(PROMPTS))


def test_a_drafter_that_goes_away_means_plain_decoding_until_it_is_back(tmp_path: Path) -> None:
    path = tmp_path / "draft.sock"
    first = RecordingDrafter(VOCAB)
    with RemoteDrafter([f"local:{path}"], deadline_s=2.0) as drafter:
        with serving_locally(first, path):
            assert drafter.wait_for_replicas(1, 5.0)
            drafter.open("r0", [1, 2, 3])
            drafter.commit("r0", [4])
            assert drafter.propose([DraftQuery("r0", BUDGET)])[0] is not None
        assert eventually(lambda: drafter.live_replicas() == [])
        drafter.commit("r0", [5, 6])
        assert drafter.propose([DraftQuery("r0", BUDGET)]) == [None]  # decoded plainly, not failed

        again = RecordingDrafter(VOCAB)
        with serving_locally(again, path):
            assert drafter.wait_for_replicas(1, 10.0)
            assert eventually(lambda: len(again.calls("open", "r0")) == 1)
            (reopen,) = again.calls("open", "r0")  # the whole history: nothing was lost
            assert reopen.tokens == (1, 2, 3, 4, 5, 6)
            tree = drafter.propose([DraftQuery("r0", BUDGET)])[0]
            assert tree is not None and int(tree.tokens[0]) == 6


def test_sending_never_blocks_the_engine_and_keeps_the_order(tmp_path: Path) -> None:
    """A drafter busy in a call reads nothing; what the socket does not take waits in a backlog."""
    path = tmp_path / "draft.sock"
    plugin = RecordingDrafter(VOCAB)
    with serving_locally(plugin, path, calls=PluginCalls.LOOP), remote([f"local:{path}"], 0.05) as drafter:
        drafter.open("r0", [1, 2])
        plugin.answering.clear()  # the next propose hangs the drafter's event loop
        try:
            assert drafter.propose([DraftQuery("r0", BUDGET)]) == [None]
            long_prompt = [i % VOCAB for i in range(2_000_000)]  # a frame of several MB
            start = time.monotonic()
            drafter.open("r1", long_prompt)
            drafter.commit("r1", [7])
            drafter.commit("r1", [8, 9])
            assert time.monotonic() - start < 1.0
        finally:
            plugin.answering.set()
        assert eventually(lambda: len(plugin.calls("commit", "r1")) == 2)
        (opened,) = plugin.calls("open", "r1")
        assert opened.tokens == tuple(long_prompt)
        assert [c.tokens for c in plugin.calls("commit", "r1")] == [(7,), (8, 9)]
        assert eventually(lambda: drafter.propose([DraftQuery("r1", BUDGET)])[0] is not None)


def test_a_malformed_stream_ends_only_its_own_connection(tmp_path: Path) -> None:
    path = tmp_path / "draft.sock"
    plugin = RecordingDrafter(VOCAB)
    with serving_locally(plugin, path):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bad:
            bad.connect(os.fspath(path))
            bad.sendall(frame(b"\xff\xff not a DraftRequest"))
            assert recv_frame(bad) is None  # closed by the server
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as big:
            big.connect(os.fspath(path))
            big.sendall(HEADER.pack(MAX_FRAME_BYTES + 1))
            assert recv_frame(big) is None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as good:
            good.connect(os.fspath(path))
            opened = drafter_pb2.OpenDraft(request_id="a", token_ids=[1, 2, 3])
            good.sendall(frame(drafter_pb2.DraftRequest(open=opened).SerializeToString()))
            propose = drafter_pb2.ProposeDrafts(round=7, items=[drafter_pb2.ProposeItem(request_id="a")])
            good.sendall(frame(drafter_pb2.DraftRequest(propose=propose).SerializeToString()))
            payload = recv_frame(good)
            assert payload is not None
            reply = drafter_pb2.DraftReply.FromString(payload)
            assert reply.round == 7 and len(reply.results) == 1
        # The connection that ended had its requests closed.
        assert eventually(lambda: len(plugin.calls("close", "a")) == 1)


def test_the_socket_is_never_clobbered(tmp_path: Path) -> None:
    path = tmp_path / "draft.sock"
    taken = tmp_path / "file"
    taken.write_text("keep me")
    with serving_locally(RecordingDrafter(VOCAB), path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        for where, why in ((path, "another process"), (taken, "not a socket")):
            second = DrafterServer(RecordingDrafter(VOCAB), "random", local_socket=where)
            try:
                with pytest.raises(SocketInUseError, match=why):
                    second.start()
            finally:
                second.stop(0)
    assert taken.read_text() == "keep me"
    assert not path.exists()  # the server removes its socket file as it stops


def test_local_addresses_are_socket_paths_only(tmp_path: Path) -> None:
    assert DrafterTargets.parse([f"local:{tmp_path}/d.sock", "127.0.0.1:5"]).resolve()[0].startswith("local:")
    for bad in ("local:127.0.0.1:5000", "local:@abstract", "local:"):
        with pytest.raises(ValueError):
            DrafterTargets.parse(bad)

"""The co-location handshake: a drafter process maps the verifier's embedding, head and feature ring
through a Unix socket; nothing else may ask, and nothing is left behind."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch

from tests.unit.model.test_forward_vs_hf import make_checkpoint
from treespec.drafter.server.plugin_calls import PluginCalls
from treespec.kernels.panel_gemm import PanelWeight
from treespec.shared.cli import drafter as drafter_cli
from treespec.shared.cli.main import build_parser
from treespec.shared.cli.serve import ServeConfig, services
from treespec.shared.cli.verifier import colocation_problem
from treespec.shared.drafting import colocation
from treespec.shared.drafting.colocated_access import ColocatedTargetAccess
from treespec.shared.drafting.colocation import ColocationServer
from treespec.shared.drafting.colocation_wire import ColocationError, HandshakeRequest
from treespec.shared.drafting.features import FeatureSpec
from treespec.shared.drafting.shared_target import SharedTarget, share_target
from treespec.shared.drafting.shared_tensor import SHM_DIR, TensorHandle
from treespec.shared.launcher.shared_cores import SPIN_COUNT
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.dual_layout import HeadWeight
from treespec.shared.model.loader import LoadOptions, load_model
from treespec.shared.rpc.private_socket import socket_path

HIDDEN = 64  # the tiny model's


LAYOUTS = {"panels": LoadOptions(), "onednn": LoadOptions(panel_weights=False)}


@pytest.fixture(params=list(LAYOUTS))
def model(tiny_path: Path, request: pytest.FixtureRequest) -> CausalLM:
    """Its own copy: co-location moves the embedding into shared memory. Either packed head layout."""
    return load_model(tiny_path, LAYOUTS[request.param])


def dense_head(head: HeadWeight) -> torch.Tensor:
    """[hidden, vocab] of a packed head (oneDNN's is packed from the transpose)."""
    return head.to_dense() if isinstance(head, PanelWeight) else head.to_dense().t()


@pytest.fixture
def server(model: CausalLM, tmp_path: Path) -> Iterator[ColocationServer]:
    with ColocationServer(tmp_path / "colocation.sock", model) as running:
        yield running


def segment_names(server: ColocationServer) -> set[str]:
    reply = server.handshake(HandshakeRequest())
    handles = (reply.embed.tensor, reply.lm_head.tensor)
    assert all(isinstance(h, TensorHandle) for h in handles)  # a CPU target's: shared memory segments
    return {h.name for h in handles if isinstance(h, TensorHandle)}


# ---- the handshake ------------------------------------------------------------------------------


def test_drafter_gets_the_targets_tensors_and_the_verifier_keeps_one_copy(
    model: CausalLM, server: ColocationServer
) -> None:
    packed_head = model.weights.lm_head
    tensors = ColocatedTargetAccess(server.path).tensors()
    assert (tensors.num_layers, tensors.hidden_size, tensors.vocab_size) == (3, HIDDEN, 97)
    assert tensors.step_weights == model.config.step_weights  # a drafter weighs its steps against it
    assert model.weights.embed is not None and torch.equal(tensors.embed, model.weights.embed)
    assert isinstance(packed_head, PanelWeight) or packed_head.is_mkldnn  # the verifier keeps it packed
    assert isinstance(tensors.lm_head, torch.Tensor)  # a drafter process gets it dense
    assert torch.equal(tensors.lm_head, dense_head(packed_head))  # [hidden, vocab]
    tensors.embed[5, 0] = 123.0  # the verifier's embedding now is the shared one
    assert float(model.weights.embed[5, 0]) == 123.0
    assert server.feature_ring is None  # nobody asked for features yet


def test_the_target_is_exported_as_the_server_starts_in_the_starting_thread(
    model: CausalLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copies into shared memory are parallel torch operations: made by the thread that starts the
    server (the verifier's engine thread), not the server's own, which would keep a second OpenMP
    team and slow the engine's products (VerifierServer.prepare)."""
    exports: list[int] = []

    def recorded(target: CausalLM) -> SharedTarget:
        exports.append(threading.get_ident())
        return share_target(target)

    monkeypatch.setattr(colocation, "share_target", recorded)
    with ColocationServer(tmp_path / "s.sock", model) as server:
        assert exports == [threading.get_ident()]
        ColocatedTargetAccess(server.path).tensors()  # a drafter attaches through the socket
    assert exports == [threading.get_ident()]


@pytest.mark.parametrize("layout", ["panels", "onednn", "dense"])
def test_a_tied_model_shares_its_one_matrix_once(tmp_path: Path, layout: str) -> None:
    make_checkpoint(tmp_path / "tied", "llama-tied-bias")
    model = load_model(tmp_path / "tied", LAYOUTS.get(layout, LoadOptions(pack_weights=False)))
    pack = layout != "dense"
    with ColocationServer(tmp_path / "s.sock", model) as server:
        reply = server.handshake(HandshakeRequest())
        assert reply.embed.tensor == reply.lm_head.tensor
        assert reply.embed.transposed != reply.lm_head.transposed
        tensors = ColocatedTargetAccess(server.path).tensors()
        assert isinstance(tensors.lm_head, torch.Tensor)
        assert tensors.embed.data_ptr() == tensors.lm_head.data_ptr()  # one mapping, two views
        assert torch.equal(tensors.lm_head, tensors.embed.t())
        tensors.embed[3, 1] = 55.0
        head = model.weights.lm_head
        verifier_embed = model.weights.embed if pack else head.t() if isinstance(head, torch.Tensor) else None
        assert verifier_embed is not None and float(verifier_embed[3, 1]) == 55.0


def _read_ring(path: str, spec: FeatureSpec, ready: Any, go: Any, slots: Any, results: Any) -> None:
    """In a spawned drafter-like process: attach to the ring, then read the slots it is told of."""
    ring = ColocatedTargetAccess(path).feature_ring(spec, 8)
    ready.set()
    go.wait(60)
    results.put(ring.read(slots.get(timeout=60)).tolist())


def test_the_ring_is_seen_by_both_processes(server: ColocationServer) -> None:
    spec = FeatureSpec(HIDDEN, (0, 1))
    context = multiprocessing.get_context("spawn")
    ready, go, slots, results = context.Event(), context.Event(), context.Queue(), context.Queue()
    child = context.Process(target=_read_ring, args=(str(server.path), spec, ready, go, slots, results))
    child.start()
    assert ready.wait(120)
    ring = server.feature_ring
    assert ring is not None and ring.spec == spec and ring.capacity == 8
    rows = torch.randn(11, spec.width)  # wraps around: the last 8 rows stay
    ring.write(rows[:6])
    written = ring.write(rows[6:])
    go.set()
    slots.put(list(written))
    got = torch.tensor(results.get(timeout=60))
    child.join(60)
    assert child.exitcode == 0 and torch.equal(got, rows[6:])


def test_same_spec_reuses_the_ring_and_another_is_refused(server: ColocationServer) -> None:
    spec = FeatureSpec(HIDDEN)
    first = ColocatedTargetAccess(server.path).feature_ring(spec, 16)
    second = ColocatedTargetAccess(server.path).feature_ring(spec, 4)  # fewer rows than there are: fine
    assert second.capacity == 16 and server.feature_ring is not None
    server.feature_ring.write(torch.ones(1, HIDDEN))
    assert torch.equal(first.buffer, second.buffer)
    for refused, capacity in ((FeatureSpec(HIDDEN, (0,)), 16), (spec, 64)):
        with pytest.raises(ColocationError, match="refused"):
            ColocatedTargetAccess(server.path).feature_ring(refused, capacity)


@pytest.mark.parametrize(
    "spec", [FeatureSpec(HIDDEN + 1), FeatureSpec(HIDDEN, (0, 2)), FeatureSpec(HIDDEN, (1, 1))]
)
def test_a_spec_the_target_cannot_publish_is_refused(server: ColocationServer, spec: FeatureSpec) -> None:
    with pytest.raises(ColocationError, match="refused"):
        ColocatedTargetAccess(server.path).feature_ring(spec, 8)
    assert server.feature_ring is None  # the engine never sees it
    assert ColocatedTargetAccess(server.path).tensors().hidden_size == HIDDEN  # still serving


def test_close_removes_the_socket_and_the_segments(model: CausalLM, tmp_path: Path) -> None:
    server = ColocationServer(tmp_path / "s.sock", model).start()
    access = ColocatedTargetAccess(server.path)
    ring = access.feature_ring(FeatureSpec(HIDDEN), 4)
    names = segment_names(server)
    server.close()
    server.close()
    assert not server.path.exists()
    assert not any((SHM_DIR / name).exists() for name in names)
    assert float(ring.buffer.sum()) == 0.0 and access.tensors().embed.shape == (97, HIDDEN)  # still mapped


# ---- who may connect ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1:5000", "localhost:80", "[::1]:80", "tcp://host:1", "dns:///drafter:1", "@abstract", ""],
)
def test_only_unix_socket_paths_are_accepted(model: CausalLM, address: str) -> None:
    with pytest.raises(ValueError):
        socket_path(address)
    with pytest.raises(ValueError):
        ColocationServer(address, model)
    with pytest.raises(ValueError):
        ColocatedTargetAccess(address)


def test_unix_paths_are_accepted_and_too_long_ones_are_not(tmp_path: Path) -> None:
    assert socket_path(f"unix:{tmp_path}/a.sock") == tmp_path / "a.sock"
    assert socket_path(f"unix://{tmp_path}/a.sock") == tmp_path / "a.sock"
    assert socket_path("relative.sock") == Path("relative.sock")
    with pytest.raises(ValueError, match="longer"):
        socket_path("/" + "x" * 200)


def test_the_socket_file_is_private_and_never_clobbers(model: CausalLM, tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    with ColocationServer(path, model) as server:
        mode = path.stat().st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        with pytest.raises(ColocationError, match="another process"):
            ColocationServer(path, model).start()
        assert server.handshake(HandshakeRequest()).vocab_size == 97
    plain_file = tmp_path / "file"
    plain_file.write_text("keep me")
    with pytest.raises(ColocationError, match="not a socket"):
        ColocationServer(plain_file, model).start()
    assert plain_file.read_text() == "keep me"


def test_a_stale_socket_file_is_replaced(model: CausalLM, tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(os.fspath(path))
    stale.close()  # the file stays, nobody listens
    with ColocationServer(path, model) as server:
        assert ColocatedTargetAccess(server.path).tensors().vocab_size == 97


def test_no_verifier_means_a_clear_error_after_the_wait(tmp_path: Path) -> None:
    with pytest.raises(ColocationError, match="no verifier co-location socket"):
        ColocatedTargetAccess(tmp_path / "missing.sock", connect_timeout_s=0.3).tensors()


def test_a_target_neither_on_cpu_nor_on_cuda_is_refused(tmp_path: Path) -> None:
    """A CUDA target is shared through CUDA IPC (tests/gpu/test_cuda_ipc.py); nothing shares others."""
    on_cuda = cast(CausalLM, SimpleNamespace(device=torch.device("cuda", 0)))
    assert ColocationServer(tmp_path / "s.sock", on_cuda).model is on_cuda  # refused no more
    for device in ("meta", "mps"):
        elsewhere = cast(CausalLM, SimpleNamespace(device=torch.device(device)))
        with pytest.raises(ColocationError, match=f"CUDA memory \\(CUDA IPC\\); the target is on {device}"):
            ColocationServer(tmp_path / "s.sock", elsewhere)


# ---- the command line ---------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_verifier_flag_checks(tmp_path: Path) -> None:
    sock = str(tmp_path / "s.sock")
    assert colocation_problem(parse("verifier")) is None
    ok = parse("verifier", "--drafter-address", "127.0.0.1:1", "--colocation-socket", sock)
    assert colocation_problem(ok) is None
    problem = colocation_problem(parse("verifier", "--colocation-socket", sock))
    assert problem is not None and "--drafter-address" in problem
    for device in ("cuda", "cuda:1", "cpu"):  # shared through CUDA IPC, or POSIX shared memory
        on = parse("verifier", "--drafter-address", "a:1", "--colocation-socket", sock, "--device", device)
        assert colocation_problem(on) is None
    on_mps = parse("verifier", "--drafter-address", "a:1", "--colocation-socket", sock, "--device", "mps")
    problem = colocation_problem(on_mps)
    assert problem is not None and "CUDA IPC" in problem and "not mps memory" in problem
    network = parse("verifier", "--drafter-address", "a:1", "--colocation-socket", "127.0.0.1:7000")
    problem = colocation_problem(network)
    assert problem is not None and "Unix domain socket" in problem


def test_drafter_flag_gives_the_plugin_colocated_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []

    def serve(config: Any) -> int:
        seen.append(config)
        return 0

    monkeypatch.setattr("treespec.drafter.server.app.serve", serve)
    sock = tmp_path / "s.sock"
    args = parse("drafter", "--kind", "random", "--vocab-size", "97", "--colocate", str(sock))
    assert drafter_cli._drafter(args) == 0
    target = seen[0].context.target
    assert isinstance(target, ColocatedTargetAccess) and target.path == sock
    args = parse("drafter", "--kind", "random", "--vocab-size", "97")
    assert drafter_cli._drafter(args) == 0 and seen[1].context.target is None
    # A co-located plugin's calls run on the server's event loop unless told otherwise (plugin_calls.py).
    base = ("drafter", "--kind", "random", "--vocab-size", "97")
    args = parse(*base, "--colocate", str(sock), "--plugin-calls", "thread")
    assert drafter_cli._drafter(args) == 0
    args = parse(*base, "--plugin-calls", "loop")
    assert drafter_cli._drafter(args) == 0
    calls = [c.plugin_calls for c in seen]
    assert calls == [PluginCalls.LOOP, PluginCalls.THREAD, PluginCalls.THREAD, PluginCalls.LOOP]
    assert all(c.local_socket is None for c in seen)
    # The Draft stream on a local socket too; a network address is refused there.
    assert drafter_cli._drafter(parse(*base, "--local-socket", f"unix:{tmp_path}/d.sock")) == 0
    assert seen[-1].local_socket == tmp_path / "d.sock"
    assert drafter_cli._drafter(parse(*base, "--local-socket", "127.0.0.1:5000")) == 2


def test_serve_links_its_drafter_through_private_sockets(tiny_path: Path) -> None:
    config = ServeConfig.on_free_ports(tiny_path, "EAGLE3")
    sock = config.colocation_socket
    assert sock is not None and config.colocated
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    processes = services(config)
    assert [p.name for p in processes] == ["verifier", "drafter", "gateway"]  # the socket comes first
    verifier, drafter = processes[0].argv, processes[1].argv
    assert verifier[verifier.index("--colocation-socket") + 1] == str(sock)
    assert drafter[drafter.index("--colocate") + 1] == str(sock)
    # The Draft stream goes over the drafter's local socket, beside the co-location one.
    local = drafter[drafter.index("--local-socket") + 1]
    assert Path(local).parent == sock.parent and local != str(sock)
    assert verifier[verifier.index("--drafter-address") + 1] == f"local:{local}"
    # the two take turns on the same cores: short OpenMP spin-waits in both (shared_cores.py)
    assert processes[0].env == processes[1].env == {"GOMP_SPINCOUNT": str(SPIN_COUNT)}

    ngram = ServeConfig.on_free_ports(tiny_path, "NGRAM")
    assert ngram.colocation_socket is None and not ngram.colocated
    processes = services(ngram)
    assert [p.name for p in processes] == ["drafter", "verifier", "gateway"]
    assert not any("--colocate" in p.argv or "--colocation-socket" in p.argv for p in processes)
    # Every drafter beside the verifier gets the Draft stream over its local socket, its calls on
    # its event loop; gRPC stays up for other verifiers.
    drafter, verifier = processes[0].argv, processes[1].argv
    draft_socket = ngram.draft_socket
    assert draft_socket is not None and stat.S_IMODE(draft_socket.parent.stat().st_mode) == 0o700
    assert drafter[drafter.index("--local-socket") + 1] == str(draft_socket)
    assert drafter[drafter.index("--plugin-calls") + 1] == "loop"
    assert drafter[drafter.index("--port") + 1] == str(ngram.drafter_port)
    assert verifier[verifier.index("--drafter-address") + 1] == f"local:{draft_socket}"
    assert not any(p.env for p in processes)

    plain = ServeConfig.on_free_ports(tiny_path, "NONE")
    assert plain.draft_socket is None and plain.colocation_socket is None
    assert [p.name for p in services(plain)] == ["verifier", "gateway"]


@pytest.mark.parametrize("variable", ["GOMP_SPINCOUNT", "OMP_WAIT_POLICY"])
def test_serve_keeps_the_users_openmp_wait_setting(
    tiny_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "1000" if variable == "GOMP_SPINCOUNT" else "active")
    processes = services(ServeConfig.on_free_ports(tiny_path, "EAGLE3"))
    assert not any(p.env for p in processes)  # theirs is inherited as it is

"""Co-located drafters over real sockets: the features a drafter reads through shared memory, behind
the gRPC Draft stream, are the ones an in-process drafter reads from the verifier's own ring."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.services.colocated import TEST_ENV
from tests.services.feature_recorder import KIND, FeatureRecordingDrafter, Rows
from treespec.drafter.server.app import DrafterServer
from treespec.shared.drafting.colocated_access import ColocatedTargetAccess
from treespec.shared.drafting.colocation import ColocationServer
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.launcher.colocated import colocated_drafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.remote_drafter import RemoteDrafter
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

VOCAB = 97
PROMPTS = [[(5 * i + 11 * j) % VOCAB for j in range(6 + 7 * i)] for i in range(3)]
NEW_TOKENS = 24


def requests(n: int = NEW_TOKENS, spec: bool = True) -> list[GenerationRequest]:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n, ignore_eos=True)
    speculation = SpeculationParams(enabled=spec)
    return [GenerationRequest(f"r{i}", p, sampling, speculation) for i, p in enumerate(PROMPTS)]


def make_engine(path: Path, model: CausalLM, drafter: Drafter | None = None) -> Engine:
    return Engine(EngineConfig(model_path=path, page_size=4, max_total_tokens=2048), drafter, model)


def generate(engine: Engine, n: int = NEW_TOKENS, spec: bool = True) -> dict[str, list[int]]:
    return {k: v.token_ids for k, v in engine.generate(requests(n, spec)).items()}


def recorder_options(want: dict[str, list[int]], aux_layer_ids: Sequence[int] = ()) -> dict[str, Any]:
    continuations = [[PROMPTS[int(rid[1:])], tokens] for rid, tokens in sorted(want.items())]
    return {"continuations": continuations, "aux_layer_ids": list(aux_layer_ids), "capacity": 512}


def in_process_rows(path: Path, model: CausalLM, options: dict[str, Any], n: int) -> dict[str, Rows]:
    """The reference: the same plugin inside the engine's process, on LocalTargetAccess."""
    plugin = FeatureRecordingDrafter(LocalTargetAccess(model), VOCAB, **options)
    engine = make_engine(path, model, plugin)
    generate(engine, n)
    assert engine.stats.accepted_tokens > 0
    return plugin.finished


@pytest.mark.parametrize("local_link", [True, False], ids=["local-socket", "grpc"])
def test_drafter_process_reads_the_verifiers_features(
    tiny_path: Path, tmp_path: Path, local_link: bool
) -> None:
    """Over either link the Advance carries the feature slots (the local socket is serve's default)."""
    model = load_model(tiny_path)  # its own: co-location moves the embedding into shared memory
    want = generate(make_engine(tiny_path, model), spec=False)
    options = recorder_options(want, aux_layer_ids=(0, 1))  # EAGLE-3-like: two layers' states
    reference = in_process_rows(tiny_path, model, options, NEW_TOKENS)
    record_dir = tmp_path / "rows"
    record_dir.mkdir()
    options = {**options, "record_dir": str(record_dir)}
    with colocated_drafter(model, KIND, options, VOCAB, tmp_path, env=TEST_ENV, local_link=local_link) as co:
        assert co.address.startswith("local:") == local_link
        ring = co.remote.feature_ring
        assert ring is not None and ring.spec.aux_layer_ids == (0, 1)
        engine = make_engine(tiny_path, model, co.remote)
        assert generate(engine) == want
        assert engine.stats.accepted_tokens > 0
        files = [record_dir / f"{rid}.pt" for rid in want]
        assert eventually(lambda: all(f.exists() for f in files), 30.0)
    for rid, file in zip(want, files, strict=True):
        got, expected = torch.load(file), reference[rid]
        assert sorted(got) == sorted(expected)
        assert set(range(len(PROMPTS[int(rid[1:])]) + 1)) <= set(got)  # the prompt's rows, and more
        for position, row in expected.items():
            torch.testing.assert_close(got[position], row, rtol=1e-4, atol=1e-5)


def test_two_replicas_share_one_ring_and_a_reopen_goes_on(tiny_path: Path, tmp_path: Path) -> None:
    """A second replica asking for the same spec maps the same ring; when the first goes away, its
    requests reopen on the second from their history (no features) and get features from then on."""
    model = load_model(tiny_path)
    n = 40
    want = generate(make_engine(tiny_path, model), n, spec=False)
    options = recorder_options(want)
    reference = in_process_rows(tiny_path, model, options, n)
    socket_path = tmp_path / "colocation.sock"
    with ColocationServer(socket_path, model) as colocation:
        a, b = recorder(socket_path, options), recorder(socket_path, options)
        ring = colocation.feature_ring
        assert ring is not None
        slots = ring.write(torch.full((2, ring.spec.width), 7.0))
        assert torch.equal(a.ring.read(slots), b.ring.read(slots))  # one ring, mapped twice
        with (
            serving(a) as (server_a, address_a),
            serving(b) as (_, address_b),
            RemoteDrafter([address_a, address_b], 5.0, features=colocation) as remote,
        ):
            assert remote.wait_for_replicas(2, 10.0) and remote.feature_ring is ring
            engine = make_engine(tiny_path, model, remote)
            for request in requests(n):
                engine.add_request(request)
            tokens: dict[str, list[int]] = {}
            run_steps(engine, tokens, 4)
            moved = [rid for rid in want if remote.replica_of(rid) == address_a]
            assert moved and all(a.rows[f"1/{rid}"] for rid in moved)
            server_a.stop(0)
            assert eventually(lambda: remote.live_replicas() == [address_b])
            run_steps(engine, tokens)
            assert tokens == want
            assert eventually(lambda: all(rid in b.finished for rid in want))
    for rid in moved:
        rows = b.finished[rid]
        start, prompt_len = min(rows), len(PROMPTS[int(rid[1:])])
        assert prompt_len < start and sorted(rows) == list(range(start, start + len(rows)))
        for position, row in rows.items():
            torch.testing.assert_close(row, reference[rid][position], rtol=1e-4, atol=1e-5)


def recorder(socket_path: Path, options: dict[str, Any]) -> FeatureRecordingDrafter:
    context = DrafterContext(VOCAB, options=options, target=ColocatedTargetAccess(socket_path))
    plugin = create_drafter(KIND, context)
    assert isinstance(plugin, FeatureRecordingDrafter)
    return plugin


@contextmanager
def serving(plugin: FeatureRecordingDrafter) -> Iterator[tuple[DrafterServer, str]]:
    server = DrafterServer(plugin, "feature-recorder")
    port = server.start()
    try:
        yield server, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def run_steps(engine: Engine, tokens: dict[str, list[int]], steps: int | None = None) -> None:
    for _ in range(steps) if steps is not None else iter(int, 1):
        if not engine.has_work():
            return
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.token_ids)


def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while not check() and time.monotonic() < end:
        time.sleep(0.02)
    return check()

"""Prefix caching under a drafter that reads the target's features (EAGLE): a request that reuses a
cached prefix hands its drafter the cached features of those positions, the same rows it would have
computed; features written under another spec (or none) are never handed out, their blocks are
computed again."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest
import torch

from tests.passthrough_drafter import PassThroughDrafter
from tests.services.feature_recorder import FeatureRecordingDrafter, Rows
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.drafting.features import FeatureRing, FeatureSpec
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.kv_cache import BlockAllocator
from treespec.shared.model.prefix_cache import PrefixCache
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.feature_cache import FeatureCache
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams
from treespec.verifier.scheduler import Scheduler
from treespec.verifier.state import RequestState

# The tiny model gains nothing from threads; on a busy 2-core machine spinning threads slow it down.
pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 97
BS = 4
FIRST = [(7 * j + 3) % VOCAB for j in range(37)]
NEW = 16


def test_rows_count_for_the_spec_they_were_written_under() -> None:
    cache = FeatureCache(num_blocks=4, block_size=BS)
    assert cache.holds_block(0)  # no drafter reads features: the K/V alone is reused
    spec = FeatureSpec(8)
    cache.follow(spec, torch.float32, torch.device("cpu"))
    assert not cache.holds_block(0)
    rows = torch.randn(6, 8)
    cache.store(torch.arange(6), rows)  # block 0 whole, block 1 half
    assert cache.holds_block(0) and not cache.holds_block(1)
    assert cache.covers(torch.arange(6)) and not cache.covers(torch.arange(8))
    assert torch.equal(cache.read(torch.tensor([5, 0])), rows[[5, 0]])
    cache.follow(FeatureSpec(8, (0, 1)), torch.float32, torch.device("cpu"))  # another spec
    assert not cache.holds_block(0)
    cache.follow(None, torch.float32, torch.device("cpu"))  # the drafter went away
    assert cache.holds_block(0)
    cache.follow(spec, torch.float32, torch.device("cpu"))  # back: rows from before are not trusted
    assert not cache.holds_block(0) and not cache.covers(torch.arange(4))


def test_a_complete_block_takes_an_incomplete_one_s_place() -> None:
    complete = {2}
    cache = PrefixCache(BlockAllocator(4), BS, complete=lambda block: block in complete)
    tokens = list(range(BS))
    first = cache.allocator.allocate(1)  # block 0: K/V only
    cache.register(tokens, first, BS, [])
    cache.allocator.free(first)
    assert cache.allocator.num_idle == 1 and cache.match(tokens, BS)[0] == []  # not reused
    second = cache.allocator.allocate(2)[1:]  # block 2, with everything (block 1 given back)
    cache.allocator.free([1])
    chain: list[int] = []
    cache.register(tokens, second, BS, chain)
    assert cache.num_cached_blocks == 1 and cache.allocator.num_idle == 0  # block 0 is free again
    found, found_chain = cache.match(tokens, BS)
    assert found == second and found_chain == chain
    cache.allocator.free(found)
    cache.allocator.free(second)
    assert cache.allocator.num_idle == 1 and cache.allocator.num_free == 4


class _Switchable(PassThroughDrafter):
    """The recorder, whose ring the engine sees only while `reading` (a co-located drafter that has
    not attached yet reads no features)."""

    def __init__(self, inner: FeatureRecordingDrafter) -> None:
        super().__init__(inner)
        self.reading = True

    @property
    def feature_ring(self) -> FeatureRing | None:
        return self.inner.feature_ring if self.reading else None


def _engine(path: Path, model: CausalLM, drafter: Drafter, caching: bool) -> Engine:
    config = EngineConfig(model_path=path, page_size=BS, max_total_tokens=1024, prefix_caching=caching)
    return Engine(config, drafter, model)


def _generate(engine: Engine, rid: str, prompt: list[int]) -> list[int]:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=NEW, ignore_eos=True)
    request = GenerationRequest(rid, prompt, sampling, SpeculationParams())
    return engine.generate([request])[rid].token_ids


def _conversation(path: Path, model: CausalLM, caching: bool) -> tuple[dict[str, Rows], Engine, list[int]]:
    """A first turn, then its second turn (the first prompt, its answer and a follow-up)."""
    recorder = FeatureRecordingDrafter(LocalTargetAccess(model), VOCAB, aux_layer_ids=(0, 1))
    engine = _engine(path, model, recorder, caching)
    answer = _generate(engine, "first", FIRST)
    second = [*FIRST, *answer, 5, 6, 7]
    _generate(engine, "second", second)
    return recorder.finished, engine, second


def test_a_reused_prefix_hands_the_drafter_its_cached_features(tiny_path: Path, tiny_model: CausalLM) -> None:
    want, _, second = _conversation(tiny_path, tiny_model, caching=False)
    got, engine, _ = _conversation(tiny_path, tiny_model, caching=True)
    assert engine.prefix_cache is not None
    assert engine.prefix_cache.hit_tokens >= len(FIRST) + NEW - 2 * BS  # the first turn, but its last block
    rows = got["second"]
    assert set(range(len(second))) <= set(rows)  # a feature for every prompt position
    assert sorted(rows) == sorted(want["second"])
    for position, row in want["second"].items():
        torch.testing.assert_close(rows[position], row, rtol=1e-4, atol=1e-4)


def test_blocks_cached_without_features_are_computed_again(tiny_path: Path, tiny_model: CausalLM) -> None:
    recorder = FeatureRecordingDrafter(LocalTargetAccess(tiny_model), VOCAB, aux_layer_ids=(0, 1))
    drafter = _Switchable(recorder)
    engine = _engine(tiny_path, tiny_model, drafter, caching=True)
    cache = engine.prefix_cache
    assert cache is not None
    drafter.reading = False
    _generate(engine, "unread", FIRST)  # K/V cached, no features
    drafter.reading = True
    _generate(engine, "read", [*FIRST, 1])
    assert cache.hit_tokens == 0  # the cached K/V had no features: computed again
    assert set(range(len(FIRST) + 1)) <= set(recorder.finished["read"])
    _generate(engine, "again", [*FIRST, 2])
    assert cache.hit_tokens == len(FIRST) // BS * BS  # now with features: reused
    rows, reference = recorder.finished["again"], recorder.finished["read"]
    for position in range(len(FIRST)):
        torch.testing.assert_close(rows[position], reference[position], rtol=1e-4, atol=1e-4)


def test_reuse_with_features_survives_preemption_and_eviction(
    tiny_path: Path, tiny_model: CausalLM, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many requests sharing prefixes in a pool too small for them (preemption, eviction of cached
    blocks) under a drafter that reads features: outputs as without the cache, every request's drafter
    rows the computed ones, and no publishing trouble."""
    preempted: list[str] = []
    preempt = Scheduler._preempt

    def counted(scheduler: Scheduler, state: RequestState) -> None:
        preempted.append(state.request_id)
        preempt(scheduler, state)

    monkeypatch.setattr(Scheduler, "_preempt", counted)
    rng = random.Random(11)
    systems = [[rng.randrange(VOCAB) for _ in range(rng.randint(9, 30))] for _ in range(3)]
    prompts = [
        rng.choice(systems) + [rng.randrange(VOCAB) for _ in range(rng.randint(1, 9))] for _ in range(18)
    ]
    runs = {}
    for caching in (False, True):
        recorder = FeatureRecordingDrafter(LocalTargetAccess(tiny_model), VOCAB, aux_layer_ids=(0, 1))
        config = EngineConfig(
            model_path=tiny_path,
            page_size=BS,
            max_total_tokens=112,
            max_running_requests=6,
            chunked_prefill_size=32,
            prefix_caching=caching,
        )
        engine = Engine(config, recorder, tiny_model)
        sampling = SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True)
        outputs: dict[str, list[int]] = {}
        with caplog.at_level(logging.WARNING):
            for wave in range(0, len(prompts), 6):
                requests = [
                    GenerationRequest(f"r{i}", p, sampling, SpeculationParams())
                    for i, p in enumerate(prompts[wave : wave + 6], start=wave)
                ]
                outputs.update({rid: r.token_ids for rid, r in engine.generate(requests).items()})
        runs[caching] = (outputs, recorder.finished, engine)
    (want, want_rows, _), (got, got_rows, engine) = runs[False], runs[True]
    assert got == want and preempted
    assert not [r for r in caplog.records if "features" in r.getMessage()]
    cache = engine.prefix_cache
    assert cache is not None and cache.hit_tokens > 0 and cache.evicted_blocks > 0
    for rid, rows in want_rows.items():
        prompt_len = len(prompts[int(rid[1:])])
        assert set(range(prompt_len)) <= set(got_rows[rid])
        for position in range(prompt_len):
            torch.testing.assert_close(got_rows[rid][position], rows[position], rtol=1e-4, atol=1e-4)

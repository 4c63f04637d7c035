"""Automatic prefix caching: the index finds exactly the cached blocks of a prompt's longest cached
prefix, evicts from a prefix's end when the pool runs short, and an engine that reuses prefixes gives
the outputs of one that computes every prompt, under speculation, preemption and eviction."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from tests.services.recording_drafter import RecordingDrafter
from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.kv_cache import BlockAllocator
from treespec.shared.model.prefix_cache import PrefixCache
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import EngineBusyError, GenerationRequest, SamplingParams, SpeculationParams

VOCAB = 97
BS = 4


def _cache(num_blocks: int) -> PrefixCache:
    return PrefixCache(BlockAllocator(num_blocks), BS)


def _cached_request(cache: PrefixCache, tokens: list[int]) -> list[int]:
    """A request that computed `tokens` in fresh blocks, registered them and finished."""
    blocks = cache.allocator.allocate(-(-len(tokens) // BS))
    cache.register(tokens, blocks, len(tokens), [])
    cache.allocator.free(blocks)
    return blocks


def test_the_longest_cached_prefix_of_full_blocks_is_found() -> None:
    cache = _cache(16)
    first = list(range(10))  # two full blocks and a partial one
    blocks = _cached_request(cache, first)
    assert cache.num_cached_blocks == 2 and cache.allocator.num_idle == 2
    assert cache.allocator.num_free == 16
    found, chain = cache.match([*range(8), 50, 51, 52, 53], limit=11)
    assert found == blocks[:2] and len(chain) == 2
    assert cache.allocator.num_idle == 0  # shared again: not evictable while held
    cache.allocator.free(found)
    # The limit (the last token is always computed) caps the match at whole blocks within it.
    assert cache.match(list(range(8)), limit=7)[0] == blocks[:1]
    # The same tokens after another prefix are another block.
    assert cache.match([*range(40, 44), *range(4, 8)], limit=8)[0] == []
    # A block's key holds its tokens exactly.
    assert cache.match([0, 1, 2, 4], limit=4)[0] == []


def test_register_extends_a_chain_and_follows_equal_blocks() -> None:
    cache = _cache(16)
    tokens = list(range(12))
    mine = cache.allocator.allocate(3)
    chain: list[int] = []
    cache.register(tokens, mine, 5, chain)  # one full block committed so far
    assert len(chain) == 1 and cache.num_cached_blocks == 1
    cache.register(tokens, mine, 12, chain)
    assert len(chain) == 3 and cache.num_cached_blocks == 3
    # Another request that computed the same tokens itself: its blocks stay private.
    other = cache.allocator.allocate(3)
    other_chain: list[int] = []
    cache.register(tokens, other, 12, other_chain)
    assert other_chain == chain and cache.num_cached_blocks == 3
    cache.allocator.free(other)
    assert cache.allocator.num_idle == 0  # not retained: straight back to the free heap
    cache.allocator.free(mine)
    assert cache.allocator.num_idle == 3


def test_a_cache_salt_shares_blocks_only_with_its_own_salt() -> None:
    cache = _cache(16)
    tokens = list(range(12))
    salted = cache.allocator.allocate(3)
    cache.register(tokens, salted, 12, [], salt="tenant-a")
    cache.allocator.free(salted)
    assert cache.match(tokens, limit=11)[0] == []  # unsalted
    assert cache.match(tokens, limit=11, salt="tenant-b")[0] == []
    found, chain = cache.match(tokens, limit=11, salt="tenant-a")
    assert found == salted[:2] and len(chain) == 2
    cache.allocator.free(found)
    # The same tokens unsalted are blocks of their own, which no salt finds.
    plain = _cached_request(cache, tokens)
    assert set(plain).isdisjoint(salted) and cache.num_cached_blocks == 6
    assert cache.match(tokens, limit=11, salt="tenant-b")[0] == []
    assert cache.match(tokens, limit=11)[0] == plain[:2]


def test_eviction_goes_least_recent_first_and_from_a_prefix_s_end() -> None:
    cache = _cache(6)
    old = _cached_request(cache, list(range(12)))  # 3 blocks
    new = _cached_request(cache, list(range(50, 62)))  # 3 blocks, the rest of the pool
    assert cache.allocator.num_free == 6
    taken = cache.allocator.allocate(2)
    assert taken == [old[2], old[1]]  # the older prefix, from its end
    assert cache.match(list(range(12)), limit=12)[0] == old[:1]
    assert cache.match(list(range(50, 62)), limit=12)[0] == new
    # Evicted blocks are forgotten: taken over by a request, they are never found again.
    small = _cache(3)
    cached = _cached_request(small, list(range(8)))
    taken = small.allocator.allocate(3)
    assert set(cached) <= set(taken) and small.num_cached_blocks == 0
    assert small.match(list(range(8)), limit=8)[0] == []


def test_drop_idle_returns_every_idle_block() -> None:
    cache = _cache(8)
    _cached_request(cache, list(range(16)))
    cache.clear()
    assert cache.num_cached_blocks == 0 and cache.allocator.num_idle == 0 and cache.allocator.num_free == 8


# ---- the engine ------------------------------------------------------------------------------------


def _prompts(rng: random.Random, n: int) -> list[list[int]]:
    """Prompts that share long prefixes: a few system prompts, some followed by the same question."""
    systems = [[rng.randrange(VOCAB) for _ in range(rng.randint(9, 30))] for _ in range(3)]
    questions = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 12))] for _ in range(4)]
    return [
        rng.choice(systems) + rng.choice(questions) + [rng.randrange(VOCAB)] * rng.randint(0, 1)
        for _ in range(n)
    ]


def _run(
    path: Path, model: CausalLM, prompts: list[list[int]], caching: bool, *, speculate: bool, pool: int
) -> tuple[dict[str, list[int]], Engine]:
    config = EngineConfig(
        model_path=path,
        page_size=BS,
        max_total_tokens=pool,
        max_running_requests=6,
        chunked_prefill_size=32,
        prefix_caching=caching,
    )
    drafter = RandomTreeDrafter(VOCAB, seed=4) if speculate else None
    engine = Engine(config, drafter, model)
    out: dict[str, list[int]] = {}
    sampling = SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True)
    # In waves: later requests find what earlier ones cached.
    for wave in range(0, len(prompts), 6):
        requests = [
            GenerationRequest(f"r{i}", p, sampling, SpeculationParams(enabled=speculate))
            for i, p in enumerate(prompts[wave : wave + 6], start=wave)
        ]
        out.update({rid: r.token_ids for rid, r in engine.generate(requests).items()})
    assert engine.num_free_blocks == config.num_blocks
    assert engine.allocator._refs == [0] * config.num_blocks
    return out, engine


def test_reused_prefixes_give_the_outputs_of_computed_ones(tiny_path: Path, tiny_model: CausalLM) -> None:
    prompts = _prompts(random.Random(3), 24)
    for speculate in (False, True):
        want, _ = _run(tiny_path, tiny_model, prompts, False, speculate=speculate, pool=4096)
        got, engine = _run(tiny_path, tiny_model, prompts, True, speculate=speculate, pool=4096)
        assert got == want
        cache = engine.prefix_cache
        assert cache is not None and cache.hit_tokens > 0.4 * cache.query_tokens


def test_reuse_survives_preemption_and_eviction(tiny_path: Path, tiny_model: CausalLM) -> None:
    # 28 blocks of 4 tokens for 6 requests of up to 55 tokens: preemption, and eviction of cached blocks.
    prompts = _prompts(random.Random(5), 24)
    want, _ = _run(tiny_path, tiny_model, prompts, False, speculate=True, pool=112)
    got, engine = _run(tiny_path, tiny_model, prompts, True, speculate=True, pool=112)
    assert got == want
    cache = engine.prefix_cache
    assert cache is not None and cache.hit_tokens > 0 and cache.evicted_blocks > 0


def test_prompt_logprobs_compute_every_prompt_row(tiny_path: Path, tiny_model: CausalLM) -> None:
    config = EngineConfig(model_path=tiny_path, page_size=BS, max_total_tokens=1024)
    engine = Engine(config, None, tiny_model)
    prompt = list(range(5, 30))
    plain = SamplingParams(temperature=0.0, max_new_tokens=3)
    engine.generate([GenerationRequest("warm", prompt, plain, SpeculationParams(enabled=False))])
    asking = SamplingParams(temperature=0.0, max_new_tokens=3, prompt_logprobs=0)
    got = engine.generate([GenerationRequest("lp", prompt, asking, SpeculationParams(enabled=False))])["lp"]
    assert got.prompt_logprobs is not None and len(got.prompt_logprobs.chosen) == len(prompt) - 1
    again = engine.generate([GenerationRequest("again", prompt, plain, SpeculationParams(enabled=False))])
    assert again["again"].token_ids == got.token_ids
    assert (
        engine.prefix_cache is not None and engine.prefix_cache.hit_tokens == 24
    )  # only "again" reused warm's blocks


def test_the_engine_reuses_a_salted_prompt_for_its_salt_only(tiny_path: Path, tiny_model: CausalLM) -> None:
    """And its drafter learns each request's salt (for a memory of other requests' text: the n-gram
    drafter's cache_salt.py)."""
    config = EngineConfig(model_path=tiny_path, page_size=BS, max_total_tokens=1024)
    drafter = RecordingDrafter(VOCAB)
    engine = Engine(config, drafter, tiny_model)
    prompt = list(range(5, 30))  # 24 tokens in full blocks before its last
    sampling = SamplingParams(temperature=0.0, max_new_tokens=3)
    cache = engine.prefix_cache
    assert cache is not None

    def hits_of(rid: str, salt: str) -> int:
        before = cache.hit_tokens
        request = GenerationRequest(rid, prompt, sampling, SpeculationParams(), cache_salt=salt)
        engine.generate([request])
        return cache.hit_tokens - before

    assert hits_of("a1", "tenant-a") == 0
    assert hits_of("b1", "tenant-b") == 0
    assert hits_of("plain1", "") == 0
    assert hits_of("a2", "tenant-a") == 24
    assert hits_of("plain2", "") == 24
    opened = {c.key: c.cache_salt for c in drafter.calls("open")}
    assert opened == {"a1": "tenant-a", "b1": "tenant-b", "plain1": "", "a2": "tenant-a", "plain2": ""}


def test_a_flush_forgets_every_cached_prefix_of_an_idle_engine(tiny_path: Path, tiny_model: CausalLM) -> None:
    config = EngineConfig(model_path=tiny_path, page_size=BS, max_total_tokens=1024)
    engine = Engine(config, None, tiny_model)
    cache = engine.prefix_cache
    assert cache is not None
    prompt = list(range(5, 30))
    sampling = SamplingParams(temperature=0.0, max_new_tokens=3)

    def run(rid: str) -> int:
        before = cache.hit_tokens
        engine.generate([GenerationRequest(rid, prompt, sampling, SpeculationParams(enabled=False))])
        return cache.hit_tokens - before

    assert run("first") == 0 and run("cached") == 24
    held = cache.num_cached_blocks
    assert held >= 6 and engine.flush_cache() == held
    assert cache.num_cached_blocks == 0 and engine.num_free_blocks == config.num_blocks
    assert run("after") == 0  # computed again
    engine.add_request(GenerationRequest("busy", prompt, sampling, SpeculationParams(enabled=False)))
    with pytest.raises(EngineBusyError):
        engine.flush_cache()
    assert Engine(replace(config, prefix_caching=False), None, tiny_model).flush_cache() == 0

"""The n-gram drafter in the engine, on the tiny random model: greedy output never changes, drafts do get
accepted, the Redis memory carries what one replica generated to another, and a Redis crash mid-run
costs no request."""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.redis_server import RedisServer
from tests.unit.drafter.ngram.backends import count_redis_contexts
from treespec.drafter.ngram.config import NgramConfig
from treespec.drafter.ngram.drafter import NgramDrafter
from treespec.drafter.ngram.redis_keys import RedisKeys, pack_tokens
from treespec.shared.drafting.drafter import DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine, GenerationResult
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams
from treespec.verifier.stats import SpecStats

# The tiny models gain nothing from threads, and on a busy 2-core machine torch's spinning threads
# make every step many times slower.
pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 97
PLAIN = SpeculationParams(enabled=False)
# Reads may wait longer than in production: a loaded test machine must not read as an outage.
REDIS_TIMEOUT_MS = 250.0
WAIT_S = 5.0


def _ngram_budget() -> SpeculationParams:
    b = NgramConfig().default_budget()
    return SpeculationParams(num_draft_tokens=b.num_draft_tokens, num_steps=b.num_steps, eagle_topk=b.topk)


NGRAM = _ngram_budget()  # SGLang's n-gram default: 12 nodes, depth 11, breadth 10


def _random_tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(3, VOCAB) for _ in range(n)]  # 0..2 are special ids (2: EOS)


def _prompts() -> dict[str, list[int]]:
    """Repetitive prompts (local n-gram matches from the start) and free ones (the tiny model's greedy
    output soon loops, which gives matches too)."""
    rng = random.Random(0)
    pattern7, pattern5 = _random_tokens(rng, 7), _random_tokens(rng, 5)
    return {
        "repeat": pattern7 * 4,
        "prefix-repeat": _random_tokens(rng, 6) + pattern5 * 5,
        "free-long": _random_tokens(rng, 20),
        "free-short": _random_tokens(rng, 9),
        "arithmetic": [(7 * j + 3) % VOCAB for j in range(14)],
        "one-token": [42],
    }


PROMPTS = _prompts()
_rng = random.Random(5)
LATE = {"late": _random_tokens(_rng, 11)}  # arrives during a Redis outage
AFTER = {"after": _random_tokens(_rng, 13)}  # arrives once Redis is back
MAX_NEW = 80


@pytest.fixture(scope="module")
def reference(tiny_path: Path, tiny_model: CausalLM) -> dict[str, list[int]]:
    """Plain greedy outputs of MAX_NEW tokens (a shorter greedy run is a prefix of these)."""
    return _plain(tiny_path, tiny_model, {**PROMPTS, **LATE, **AFTER}, MAX_NEW)


def _cut(outputs: dict[str, list[int]], n: int, names: Iterable[str]) -> dict[str, list[int]]:
    return {name: outputs[name][:n] for name in names}


def _engine(path: Path, model: CausalLM, drafter: NgramDrafter | None = None) -> Engine:
    """Verify rows are free here (node cost 0) and every step drafts (no speculation gate): on the
    tiny model a row is a large part of a step, and these tests are about what the drafter proposes;
    tree_builder's tests cover the node cost."""
    config = EngineConfig(
        model_path=path,
        page_size=4,
        max_total_tokens=4096,
        speculation=NGRAM,
        node_cost=0.0,
        adaptive_speculation=False,
    )
    return Engine(config, drafter, model)


def _ngram(path: Path, **options: Any) -> NgramDrafter:
    drafter = create_drafter("ngram", DrafterContext(VOCAB, path, dict(options)))
    assert isinstance(drafter, NgramDrafter)
    return drafter


def _redis_ngram(path: Path, url: str, namespace: str, **options: Any) -> NgramDrafter:
    return _ngram(path, redis_url=url, namespace=namespace, redis_timeout_ms=REDIS_TIMEOUT_MS, **options)


def _request(rid: str, prompt: Sequence[int], n: int, spec: SpeculationParams = NGRAM) -> GenerationRequest:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n, ignore_eos=True)
    return GenerationRequest(rid, list(prompt), sampling, spec)


def _plain(path: Path, model: CausalLM, prompts: dict[str, list[int]], n: int) -> dict[str, list[int]]:
    got = _engine(path, model).generate(_request(rid, p, n, PLAIN) for rid, p in prompts.items())
    return {rid: r.token_ids for rid, r in got.items()}


def _tokens(results: dict[str, GenerationResult]) -> dict[str, list[int]]:
    return {rid: r.token_ids for rid, r in results.items()}


def _wait(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _run(
    engine: Engine, tokens: dict[str, list[int]], results: dict[str, SpecStats], steps: int = -1
) -> None:
    """Engine steps (all of them when `steps` < 0), collecting tokens and the finished requests' stats."""
    while engine.has_work() and steps != 0:
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.token_ids)
            if out.finished:
                results[out.request_id] = out.stats or SpecStats()
        steps -= 1


def _no_invalid_trees(caplog: pytest.LogCaptureFixture) -> None:
    """The engine drops a tree over budget (or malformed) with a warning and decodes plainly: that would
    hide a drafter bug behind a still-lossless output."""
    dropped = [r.getMessage() for r in caplog.records if r.name.startswith("treespec.verifier")]
    assert not dropped, dropped


# ---- 1. lossless, batched, in-process memory ----------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"match_type": "BFS"},
        {"match_type": "PROB"},
        {
            "match_type": "PROB",
            "learn_from_prompts": True,
            "min_match_window_size": 2,
            "max_match_window_size": 4,
            "min_bfs_breadth": 2,
            "max_bfs_breadth": 3,
            "min_path_prob": 0.0,
        },
    ],
    ids=["bfs", "prob", "prob-other-settings"],
)
def test_greedy_output_is_unchanged_and_drafts_are_accepted(
    tiny_path: Path,
    tiny_model: CausalLM,
    reference: dict[str, list[int]],
    caplog: pytest.LogCaptureFixture,
    options: dict[str, Any],
) -> None:
    caplog.set_level(logging.WARNING)
    prompts = PROMPTS
    n = 64
    want = _cut(reference, n, prompts)
    drafter = _ngram(tiny_path, **options)
    engine = _engine(tiny_path, tiny_model, drafter)
    small = SpeculationParams(num_draft_tokens=4, num_steps=2, eagle_topk=2)
    specs = {"free-short": small, "one-token": PLAIN}
    try:
        got = engine.generate(_request(rid, p, n, specs.get(rid, NGRAM)) for rid, p in prompts.items())
    finally:
        drafter.shutdown()
    assert _tokens(got) == want
    assert all(len(tokens) == n for tokens in want.values())
    # not vacuous: the drafter proposed, and more than one token per step was committed overall
    assert engine.stats.drafted_tokens > 0 and engine.stats.accepted_tokens > 0
    assert engine.stats.acceptance_length > 1.5, engine.stats.to_dict()
    assert got["repeat"].stats.acceptance_length > 2.0, got["repeat"].stats.to_dict()
    assert got["one-token"].stats.drafted_tokens == 0
    # budgets respected: at most 3 drafted nodes per step and depth 2 for the small budget
    assert got["free-short"].stats.drafted_tokens <= 3 * got["free-short"].stats.verify_steps
    assert len(got["free-short"].stats.drafted_by_depth) <= 2
    assert len(engine.stats.drafted_by_depth) <= NGRAM.num_steps
    _no_invalid_trees(caplog)
    assert engine.num_free_blocks == engine.config.num_blocks
    assert not drafter._requests  # every request closed


def test_in_process_memory_helps_the_next_requests(
    tiny_path: Path, tiny_model: CausalLM, reference: dict[str, list[int]]
) -> None:
    """The same prompts again (new requests): the memory now holds their outputs, so nearly every step
    commits a long chain."""
    prompts = PROMPTS
    n = 48
    want = _cut(reference, n, prompts)
    drafter = _ngram(tiny_path)
    try:
        first = _engine(tiny_path, tiny_model, drafter)
        assert _tokens(first.generate(_request(rid, p, n) for rid, p in prompts.items())) == want
        second = _engine(tiny_path, tiny_model, drafter)
        got = second.generate(_request(f"again-{rid}", p, n) for rid, p in prompts.items())
    finally:
        drafter.shutdown()
    assert {rid.removeprefix("again-"): t for rid, t in _tokens(got).items()} == want
    assert second.stats.acceptance_length > first.stats.acceptance_length + 1.0, (
        first.stats.to_dict(),
        second.stats.to_dict(),
    )
    assert second.num_free_blocks == second.config.num_blocks


# ---- 2. a memory shared across replicas (Redis) -------------------------------------------------------

HEAD = 4  # tokens of A's continuation that B's prompt already holds
B_TOKENS = 48  # what B generates (all within what A generated)
A_TOKENS = HEAD + B_TOKENS + 8


def _shared_workload(path: Path, model: CausalLM) -> tuple[list[int], list[int], list[int]]:
    """(P1, C, P2): A generates C after P1; B gets P2 = P1 + C[:HEAD], whose greedy continuation is
    C[HEAD:], so that every n-gram B needs was recorded by A (A's output), while B's own history
    (prompt + output) holds little to match: C is picked with the fewest repeats (the tiny model's
    outputs all loop sooner or later; replica C, with an empty memory, measures what local matching
    gets out of that).

    Why not "another prefix + P1's last tokens": on the tiny random model (full attention, random
    weights) the continuation depends on the whole prompt, even changing the first of 64 prompt tokens
    changes the continuation within a few tokens, so such prompts never share continuations here.
    A follow-up request (the conversation so far + a few more tokens) does."""
    rng = random.Random(2)
    candidates = {f"p{i}": _random_tokens(rng, 16) for i in range(8)}
    continuations = _plain(path, model, candidates, A_TOKENS)

    def repeats(c: Sequence[int]) -> int:  # bigrams seen before: what local matching could use
        seen: set[tuple[int, int]] = set()
        count = 0
        for bigram in itertools.pairwise(c):
            count += bigram in seen
            seen.add(bigram)
        return count

    ranked = sorted(candidates, key=lambda rid: (repeats(continuations[rid]), rid))[:3]
    followups = {rid: candidates[rid] + continuations[rid][:HEAD] for rid in ranked}
    followed = _plain(path, model, followups, B_TOKENS)
    for rid in ranked:
        c = continuations[rid]
        if followed[rid] == c[HEAD : HEAD + B_TOKENS]:
            return candidates[rid], c, followups[rid]
    pytest.fail("no candidate workload: the construction above no longer holds on the tiny model")


def test_a_replica_drafts_from_what_another_generated(
    tiny_path: Path, tiny_model: CausalLM, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    p1, c, p2 = _shared_workload(tiny_path, tiny_model)
    assert p2 != p1 and len(c) == A_TOKENS
    # replicas A and B: separate drafters and engines, one Redis namespace; replica C: an empty memory
    a = _redis_ngram(tiny_path, redis_server.url, "test-shared")
    b = _redis_ngram(tiny_path, redis_server.url, "test-shared")
    c_ = _redis_ngram(tiny_path, redis_server.url, "test-empty")
    try:
        engine_a = _engine(tiny_path, tiny_model, a)
        assert engine_a.generate([_request("a1", p1, A_TOKENS)])["a1"].token_ids == c
        assert a.memory.flush()
        assert count_redis_contexts(redis_server.url, "test-shared") > 0

        engine_b = _engine(tiny_path, tiny_model, b)
        got_b = engine_b.generate([_request("b1", p2, B_TOKENS)])["b1"]
        engine_c = _engine(tiny_path, tiny_model, c_)
        got_c = engine_c.generate([_request("c1", p2, B_TOKENS)])["c1"]
        assert a.memory.healthy and b.memory.healthy and c_.memory.healthy
    finally:
        for drafter in (a, b, c_):
            drafter.shutdown()
    assert got_b.token_ids == got_c.token_ids == c[HEAD : HEAD + B_TOKENS]
    with_memory, without = got_b.stats.acceptance_length, got_c.stats.acceptance_length
    assert with_memory >= without + 1.0 and with_memory >= 1.5 * without, (
        got_b.stats.to_dict(),
        got_c.stats.to_dict(),
    )
    for engine in (engine_a, engine_b, engine_c):
        assert engine.num_free_blocks == engine.config.num_blocks
    _no_invalid_trees(caplog)


# ---- 3. Redis crashes mid-run --------------------------------------------------------------------------


def test_a_redis_crash_mid_run_loses_no_request(
    tiny_path: Path, tiny_model: CausalLM, reference: dict[str, list[int]], redis_server: RedisServer
) -> None:
    prompts, late, after = PROMPTS, LATE, AFTER
    n = MAX_NEW
    want = reference
    namespace = "test-crash"
    drafter = _redis_ngram(tiny_path, redis_server.url, namespace)
    engine = _engine(tiny_path, tiny_model, drafter)
    tokens: dict[str, list[int]] = {}
    stats: dict[str, SpecStats] = {}
    try:
        for rid, prompt in prompts.items():
            engine.add_request(_request(rid, prompt, n))
        _run(engine, tokens, stats, steps=6)
        assert drafter.memory.healthy and not stats
        assert all(len(tokens.get(rid, [])) > 4 for rid in prompts)

        redis_server.stop()  # SIGKILL, mid-run: the server keeps nothing
        _run(engine, tokens, stats, steps=2)
        engine.add_request(_request("late", late["late"], n))
        _run(engine, tokens, stats)
        assert {rid: tokens[rid] for rid in stats} == {rid: want[rid] for rid in stats}
        assert sorted(stats) == sorted([*prompts, "late"])
        assert stats["late"].drafted_tokens > 0  # drafted from local matches during the outage
        assert _wait(lambda: not drafter.memory.healthy)
        assert not drafter.memory.flush(timeout_s=0.1)  # the writes of the outage wait in the buffer

        redis_server.start()  # the same port
        assert _wait(lambda: drafter.memory.healthy)
        assert drafter.memory.flush()
        assert count_redis_contexts(redis_server.url, namespace) > 0  # the buffer drained

        engine.add_request(_request("after", after["after"], n))
        _run(engine, tokens, stats)
        assert tokens["after"] == want["after"]
        assert drafter.memory.flush()
        assert drafter.memory.healthy
    finally:
        drafter.shutdown()
    assert engine.num_free_blocks == engine.config.num_blocks
    # the new request's observations are in Redis: what followed its prompt's last 3 tokens
    prompt, output = after["after"], tokens["after"]
    context_key = RedisKeys(namespace).context(pack_tokens(prompt[-3:]))
    branch = NgramConfig().branch_length
    client = redis.Redis.from_url(redis_server.url)
    try:
        assert (client.zscore(context_key, pack_tokens(output[:branch])) or 0) >= 1
        keys = _scan(client, RedisKeys(namespace).prefix + b"*")
    finally:
        client.close()
    assert RedisKeys(namespace).index in keys and len(keys) > branch


def _scan(client: redis.Redis, pattern: bytes) -> set[bytes]:
    found: Iterable[bytes] = client.scan_iter(match=pattern, count=1000)
    return set(found)

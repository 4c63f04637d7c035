"""The engine splits each step's time into drafting and the rest: what the benches report per verify
step and the verifier exports as histograms."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from tests.unit.verifier.test_engine_greedy import VOCAB, engine, greedy
from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.model.causal_lm import CausalLM

DELAY_S = 0.02


class SlowDrafter(RandomTreeDrafter):
    """Random trees, each batch of them `delay_s` late."""

    delay_s = DELAY_S

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        time.sleep(self.delay_s)
        return super().propose(queries)


class SlowToCommitDrafter(RandomTreeDrafter):
    """Random trees, each commit `delay_s` late (a drafter's history or memory writes)."""

    delay_s = DELAY_S

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        time.sleep(self.delay_s)
        super().commit(request_id, tokens, features)


def test_drafting_time_is_counted_apart_from_the_step(tiny_path: Path, tiny_model: CausalLM) -> None:
    # Every step drafts (no speculation gate, which would soon leave out so slow a drafter).
    e = engine(tiny_path, tiny_model, SlowDrafter(VOCAB, seed=3), adaptive_speculation=False)
    start = time.perf_counter()
    e.generate(greedy(i, n=6) for i in range(2))
    wall = time.perf_counter() - start
    t = e.timings
    # Every decode step drafts once for the batch (both requests at most): at least this many delays.
    decode_steps = -(-e.stats.verify_steps // 2)
    assert t.steps >= decode_steps > 0
    assert DELAY_S * decode_steps <= t.draft_s < t.step_s <= wall


def test_telling_the_drafter_is_counted_as_drafting(tiny_path: Path, tiny_model: CausalLM) -> None:
    e = engine(tiny_path, tiny_model, SlowToCommitDrafter(VOCAB, seed=3), adaptive_speculation=False)
    e.add_request(greedy(0, n=6))
    told = 0.0
    while e.has_work():
        e.step()
        step = e.last_step
        assert step is not None and step.drafting_s == (step.draft_s or 0.0) + step.told_s
        # Every step but the last tells the drafter its tokens (a finished request is closed instead).
        assert step.told_s >= DELAY_S or not e.has_work()
        told += step.told_s
    assert e.timings.told_s == told >= DELAY_S * (e.timings.steps - 1)
    assert e.timings.draft_s < e.timings.told_s < e.timings.step_s
    assert e.timings.drafting_s == e.timings.draft_s + e.timings.told_s


def test_without_a_drafter_no_step_drafts(tiny_path: Path, tiny_model: CausalLM) -> None:
    e = engine(tiny_path, tiny_model)
    e.add_request(greedy(0, spec=False, n=3))
    e.step()
    assert e.last_step is not None and e.last_step.draft_s is None and e.last_step.step_s > 0
    while e.has_work():
        e.step()
    assert e.timings.draft_s == e.timings.told_s == 0.0 and e.timings.steps >= 3  # a prefill, 2 decodes


def test_generate_shows_each_output_as_it_comes(tiny_path: Path, tiny_model: CausalLM) -> None:
    """What a bench times the first token with: the outputs in order, their tokens the result's."""
    e = engine(tiny_path, tiny_model, RandomTreeDrafter(VOCAB, seed=5))
    seen: list[tuple[str, list[int], bool]] = []
    results = e.generate(
        [greedy(0, n=5), greedy(1, n=4)],
        on_output=lambda out: seen.append((out.request_id, out.token_ids, out.finish_reason is not None)),
    )
    for rid, result in results.items():
        mine = [(tokens, done) for r, tokens, done in seen if r == rid]
        assert [t for tokens, _ in mine for t in tokens] == result.token_ids
        assert mine[0][0] and mine[-1][1] and not any(done for _, done in mine[:-1])

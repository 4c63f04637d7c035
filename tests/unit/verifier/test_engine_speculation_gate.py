"""The engine's speculation gate (speculation_gate.py): a drafter that only slows decoding is left out
of most steps, vLLM's disable_by_batch_size leaves out large batches, outputs never change."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.verifier.test_engine_greedy import PROMPTS, VOCAB, engine, greedy, plain
from tests.unit.verifier.test_step_timing import SlowDrafter, SlowToCommitDrafter
from treespec.drafter.oracle.drafter import OracleDrafter
from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import GenerationResult
from treespec.verifier.speculation_gate import FIRST_WAIT, MIN_STEPS

N = 40  # new tokens a request: enough steps for the gate to judge and leave drafting out
DELAY_S = 0.1  # a drafting round's delay: far beyond a tiny-model step, even on a busy machine


class SlowerDrafter(SlowDrafter):
    delay_s = DELAY_S


class SlowerToCommitDrafter(SlowToCommitDrafter):
    delay_s = DELAY_S


def tokens(results: dict[str, GenerationResult]) -> dict[str, list[int]]:
    return {k: v.token_ids for k, v in results.items()}


def test_a_drafter_that_only_slows_decoding_is_left_out(tiny_path: Path, tiny_model: CausalLM) -> None:
    """Random trees (rarely accepted) DELAY_S late, against tiny-model steps of a few milliseconds."""
    want = engine(tiny_path, tiny_model).generate([greedy(0, spec=False, n=N)])
    e = engine(tiny_path, tiny_model, SlowerDrafter(VOCAB, seed=3))
    got = e.generate([greedy(0, n=N)])
    assert tokens(got) == tokens(want)
    t = e.timings
    asked = t.steps - 1 - t.gated_steps  # the prefill step asks nothing of the gate
    # The gate judged MIN_STEPS drafting steps, left drafting out for FIRST_WAIT steps, then tried
    # again (a try: MIN_STEPS + 1 steps) and left it out again.
    assert t.gated_steps >= FIRST_WAIT
    assert MIN_STEPS <= asked <= 2 * MIN_STEPS + 1
    assert t.draft_s >= DELAY_S * asked
    assert e.last_step is not None


def test_a_drafter_slow_to_take_commits_is_left_out(tiny_path: Path, tiny_model: CausalLM) -> None:
    """Random trees at once, but every commit DELAY_S late: telling the drafter is drafting too."""
    want = engine(tiny_path, tiny_model).generate([greedy(0, spec=False, n=N)])
    e = engine(tiny_path, tiny_model, SlowerToCommitDrafter(VOCAB, seed=3))
    got = e.generate([greedy(0, n=N)])
    assert tokens(got) == tokens(want)
    asked = e.timings.steps - 1 - e.timings.gated_steps
    assert e.timings.gated_steps >= FIRST_WAIT and asked <= 2 * MIN_STEPS + 1


def test_a_drafter_that_pays_is_never_left_out(tiny_path: Path, tiny_model: CausalLM) -> None:
    """Trees of the greedy continuation itself: every step commits a chain."""
    n = 4 * N  # some 40 steps of trees
    want = engine(tiny_path, tiny_model).generate(greedy(i, spec=False, n=n) for i in range(2))
    continuations = {tuple(PROMPTS[i]): want[f"r{i}"].token_ids for i in range(2)}
    e = engine(tiny_path, tiny_model, OracleDrafter(continuations, VOCAB, seed=1))
    got = e.generate(greedy(i, n=n) for i in range(2))
    assert tokens(got) == tokens(want)
    assert e.timings.gated_steps == 0 and e.stats.acceptance_length > 3.0
    assert e.stats.verify_steps > 2 * MIN_STEPS


def test_without_adaptation_every_step_drafts(tiny_path: Path, tiny_model: CausalLM) -> None:
    e = engine(tiny_path, tiny_model, SlowerDrafter(VOCAB, seed=3), adaptive_speculation=False)
    e.generate([greedy(0, n=N)])
    assert e.timings.gated_steps == 0
    assert e.timings.draft_s >= DELAY_S * (e.timings.steps - 1)


def test_disable_by_batch_size(tiny_path: Path, tiny_model: CausalLM) -> None:
    """Three requests at once do not draft; once two have finished, the last one does."""
    want = plain(tiny_path, tiny_model)
    e = engine(
        tiny_path,
        tiny_model,
        RandomTreeDrafter(VOCAB, seed=5),
        speculative_disable_by_batch_size=2,
        adaptive_speculation=False,
    )
    lengths = [4, 4, 12]
    results: dict[str, list[int]] = {}
    drafted_while_batched = 0
    for i in range(3):
        e.add_request(greedy(i, n=lengths[i]))
    while e.has_work():
        running = e.num_running
        drafted = e.stats.drafted_tokens
        for out in e.step():
            results.setdefault(out.request_id, []).extend(out.token_ids)
        if running >= 2:
            drafted_while_batched += e.stats.drafted_tokens - drafted
    assert drafted_while_batched == 0
    assert e.timings.gated_steps > 0 and e.stats.drafted_tokens > 0  # the last request alone drafted
    for rid, ids in results.items():
        assert ids == want[rid].token_ids[: len(ids)]


def test_bad_disable_by_batch_size_is_refused(tiny_path: Path) -> None:
    with pytest.raises(ValueError, match="speculative_disable_by_batch_size"):
        EngineConfig(model_path=tiny_path, speculative_disable_by_batch_size=0)

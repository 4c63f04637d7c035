"""The measured verify cost follows the engine's own decode steps: a line fitted through (rows, seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.verifier.test_verify_cost import greedy, measuring_engine
from treespec.shared.drafting.tree_value import nodes_worth_verifying
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.verify_cost import VerifyCost
from treespec.verifier.verify_cost_fit import MIN_STEP_OF_PROBE, MIN_WEIGHT, OnlineVerifyCost

PRIOR = VerifyCost(step_s=0.025, row_s=0.002)


def feed(cost: OnlineVerifyCost, step_s: float, row_s: float, rows: list[int], times: int = 1) -> None:
    for _ in range(times):
        for r in rows:
            cost.observe(r, step_s + (r - 1) * row_s)


def test_the_probe_stands_until_enough_steps_are_seen() -> None:
    cost = OnlineVerifyCost(PRIOR)
    feed(cost, 0.030, 0.006, [1, 5, 9], times=int(MIN_WEIGHT) // 3 - 1)
    assert cost.at(1) == PRIOR and cost.node_cost(1) == pytest.approx(0.08)


def test_steps_of_varied_sizes_give_their_own_line() -> None:
    cost = OnlineVerifyCost(PRIOR)
    feed(cost, 0.030, 0.006, [1, 3, 5, 9, 2], times=20)
    assert cost.at(1).step_s == pytest.approx(0.030)
    assert cost.at(1).row_s == pytest.approx(0.006)
    assert cost.node_cost(1) == pytest.approx(0.2)
    assert cost.observations == 100


def feed_trees(cost: OnlineVerifyCost, truth: VerifyCost, rows: list[int], times: int) -> None:
    """Batch-1 steps: one row decodes plainly, more rows verify a tree."""
    for _ in range(times):
        for r in rows:
            tree = r > 1
            cost.observe(r, truth.step_s + (r - 1) * truth.row_s + tree * truth.tree_s, int(tree))


def test_steps_with_and_without_trees_give_the_fixed_part_of_a_tree() -> None:
    truth = VerifyCost(step_s=0.030, row_s=0.001, tree_s=0.004)
    cost = OnlineVerifyCost(PRIOR)
    feed_trees(cost, truth, [1, 2, 5, 1, 9, 3], times=20)
    assert cost.at(1).step_s == pytest.approx(truth.step_s)
    assert cost.at(1).row_s == pytest.approx(truth.row_s)
    assert cost.at(1).tree_s == pytest.approx(truth.tree_s)
    assert cost.tree_cost(1) == pytest.approx(0.004 / 0.030)


def test_when_every_step_verifies_a_tree_the_probe_gives_its_fixed_part() -> None:
    prior = VerifyCost(step_s=0.040, row_s=0.002, tree_s=0.004)
    truth = VerifyCost(step_s=0.080, row_s=0.003, tree_s=0.008)  # twice as slow, rows dearer
    cost = OnlineVerifyCost(prior)
    feed_trees(cost, truth, [2, 5, 9, 3], times=25)
    fitted = cost.at(1)
    assert fitted.row_s == pytest.approx(truth.row_s)
    assert fitted.tree_s == pytest.approx(prior.tree_s * fitted.step_s / prior.step_s, rel=0.15)
    # the plane still passes through the observed steps
    mean_rows = (2 + 5 + 9 + 3) / 4
    observed = truth.step_s + (mean_rows - 1) * truth.row_s + truth.tree_s
    assert fitted.step_s + (mean_rows - 1) * fitted.row_s + fitted.tree_s == pytest.approx(observed)


def test_one_row_steps_only_scale_the_probe_and_keep_its_node_cost() -> None:
    cost = OnlineVerifyCost(PRIOR)
    feed(cost, 0.080, 0.0, [1], times=50)  # twice as slow, no drafts: the split cannot be seen
    assert cost.at(1).step_s == pytest.approx(0.080)
    assert cost.node_cost(1) == pytest.approx(PRIOR.node_cost(1))
    assert cost.node_cost(8) == pytest.approx(PRIOR.node_cost(8))


def test_recent_steps_outweigh_old_ones() -> None:
    cost = OnlineVerifyCost(PRIOR, half_life=20.0)
    feed(cost, 0.030, 0.006, [1, 4, 8], times=30)
    feed(cost, 0.060, 0.001, [1, 4, 8], times=60)  # the machine got busy: rows relatively cheap
    assert cost.at(1).step_s == pytest.approx(0.060, rel=0.02)
    assert cost.at(1).row_s == pytest.approx(0.001, rel=0.1)


def test_a_one_row_step_is_never_fitted_below_the_probe_s() -> None:
    """A drafter that always drafts: rows vary only with the batch, and each further request costs
    more than its rows (8 ms of its own here). A free line charged that to the rows and put one row at
    3 ms (node cost 0.53); held at the probe's step, a node costs a fraction of that."""
    prior = VerifyCost(step_s=0.010, row_s=0.0006)
    cost = OnlineVerifyCost(prior)
    for _ in range(10):
        for batch in range(8, 16):  # one batch regime; no single request seen yet
            rows = 8 * batch
            cost.observe(rows, 0.010 + (rows - 1) * 0.0006 + (batch - 1) * 0.008, batch, batch)
    assert cost.at(1).step_s == pytest.approx(MIN_STEP_OF_PROBE * prior.step_s)
    assert cost.at(8) == cost.at(1)  # the regime's plane is the plane through every step here
    assert cost.at(1).row_s > prior.row_s  # the batches' own costs still show, bounded
    assert cost.node_cost(1) < 0.2 and cost.tree_cost(1) == 0.0
    # A predicted output's chain, 0.8 of its tokens accepted, stays worth verifying.
    chain = [0.8 ** (d + 1) for d in range(16)]
    assert nodes_worth_verifying(chain, cost.node_cost(1), cost.tree_cost(1)) >= 3


def feed_batch(cost: OnlineVerifyCost, truth: VerifyCost, batch: int, nodes: list[int], times: int) -> None:
    """Steps of `batch` decodes, each request verifying a tree of the given nodes (0: none)."""
    for _ in range(times):
        for n in nodes:
            rows, trees = batch * (1 + n), batch * (n > 0)
            cost.observe(rows, truth.step_s + (rows - 1) * truth.row_s + trees * truth.tree_s, trees, batch)


def test_a_burst_of_requests_leaves_the_single_request_figures_as_they_were() -> None:
    """Alone, a request's step is mostly fixed cost; in a batch of 16 rows cost far more (the line
    through both charges the requests' own costs to the rows). After the burst, a single request is
    priced as before it, not by a line still leaning on the burst's steps."""
    alone = VerifyCost(step_s=0.030, row_s=0.001, tree_s=0.004)
    crowded = VerifyCost(step_s=0.025, row_s=0.004, tree_s=0.002)
    cost = OnlineVerifyCost(PRIOR)
    feed_batch(cost, alone, 1, [0, 3, 7, 1, 5], times=20)
    before = cost.at(1)
    feed_batch(cost, crowded, 16, [0, 3, 7, 1, 5], times=60)  # more steps than the half-life
    assert cost.at(1) == before
    assert before.row_s == pytest.approx(alone.row_s) and before.tree_s == pytest.approx(alone.tree_s)
    assert cost.node_cost(1) == pytest.approx(alone.node_cost(1))
    # a step of 16 decodes is priced from the burst's own steps: their decode step and part per row
    busy = cost.at(16)
    assert busy.row_s == pytest.approx(crowded.row_s)
    assert busy.step_s + 15 * busy.row_s == pytest.approx(crowded.step_s + 15 * crowded.row_s)
    assert cost.node_cost(16) == pytest.approx(crowded.node_cost(16))


def test_a_batch_regime_seen_too_rarely_is_priced_from_every_step() -> None:
    alone = VerifyCost(step_s=0.030, row_s=0.001)
    paired = VerifyCost(step_s=0.020, row_s=0.006)
    cost, pooled = OnlineVerifyCost(PRIOR), OnlineVerifyCost(PRIOR)  # pooled: every step as one regime
    steps = [(alone, 1, 10), (paired, 2, int(MIN_WEIGHT) // 4 - 1)]  # too few pairs for a plane of their own
    for truth, batch, times in steps:
        feed_batch(cost, truth, batch, [0, 2, 4, 8], times)
        for _ in range(times):
            for n in [0, 2, 4, 8]:
                rows = batch * (1 + n)
                pooled.observe(rows, truth.step_s + (rows - 1) * truth.row_s, batch * (n > 0))
    assert cost.at(1).row_s == pytest.approx(alone.row_s)
    assert cost.at(2) == cost.at(3) == cost.at(7) == pooled.at(1)  # 2-3 too few; 4-7 none
    assert pooled.at(1).row_s > 1.5 * alone.row_s  # the pairs' dearer rows show in it
    feed_batch(cost, paired, 3, [0, 2, 4, 8], times=4)  # now enough in the regime 2-3
    assert cost.at(2).row_s == pytest.approx(paired.row_s)
    assert cost.at(1).row_s == pytest.approx(alone.row_s)


def test_a_probe_slowed_by_other_work_does_not_pin_the_step() -> None:
    """The probe timed one row at 1 s (the machine was busy as it started); served steps take 10 ms."""
    cost = OnlineVerifyCost(VerifyCost(step_s=1.0, row_s=0.002))
    feed(cost, 0.010, 0.001, [1, 3, 5, 9, 2], times=20)
    assert cost.at(1).step_s == pytest.approx(0.010)
    assert cost.at(1).row_s == pytest.approx(0.001)
    assert cost.node_cost(1) == pytest.approx(0.1)


def test_nonsense_observations_are_ignored() -> None:
    cost = OnlineVerifyCost(PRIOR)
    cost.observe(0, 0.05)
    cost.observe(3, 0.0)
    cost.observe(3, float("nan"))
    assert cost.observations == 0


def test_the_engine_refines_its_measured_cost_from_decode_steps_only(
    tiny_path: Path, tiny_model: CausalLM
) -> None:
    engine, drafter = measuring_engine(tiny_path, tiny_model)
    engine.generate([greedy("a", 10)])
    # The first step prefills the prompt; each later one decodes (with or without a tree).
    decode_steps = len(drafter.queries)
    assert decode_steps >= 1 and engine.verify_cost_observations == decode_steps

    fixed = Engine(
        EngineConfig(model_path=tiny_path, max_total_tokens=512, node_cost=0.1), drafter, tiny_model
    )
    fixed.generate([greedy("b", 10)])
    assert fixed.verify_cost_observations == 0

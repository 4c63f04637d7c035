"""The verify cost: measured as the engine starts, scaled by the batch, handed to drafters per step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.model.attention.torch_backend import TorchAttentionBackend
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.kv_cache import KVCache
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams
from treespec.verifier.verify_cost import FixedNodeCost, VerifyCost, measure_verify_cost


class BudgetRecorder(RandomTreeDrafter):
    """The random drafter, keeping every query it is asked (to see the budgets the engine sends)."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self.queries: list[DraftQuery] = []

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        self.queries.extend(queries)
        return super().propose(queries)


def greedy(rid: str, n: int = 6) -> GenerationRequest:
    return GenerationRequest(rid, [3, 1, 4, 1, 5, 9], SamplingParams(temperature=0.0, max_new_tokens=n))


def measuring_engine(tiny_path: Path, tiny_model: CausalLM) -> tuple[Engine, BudgetRecorder]:
    """An engine with a drafter and no configured node cost: it measures its own."""
    drafter = BudgetRecorder(tiny_model.config.vocab_size)
    config = EngineConfig(model_path=tiny_path, max_total_tokens=512, speculation=SpeculationParams())
    return Engine(config, drafter, tiny_model), drafter


def test_a_node_costs_its_row_over_the_request_share_of_a_step() -> None:
    cost = VerifyCost(step_s=0.040, row_s=0.002)
    assert cost.node_cost(1) == pytest.approx(0.05)
    # four requests share a step of 0.040 + 3 * 0.002 s: a node is 0.002 of each one's 0.0115 s
    assert cost.node_cost(4) == pytest.approx(4 * 0.002 / 0.046)
    # a large batch: a row costs nearly what a request's own decoding row does
    assert cost.node_cost(1000) == pytest.approx(2.0 / 2.038)
    assert cost.node_cost(1000) < 1.0
    assert VerifyCost(step_s=0.0, row_s=0.001).node_cost(1) == 0.0


def test_a_tree_costs_its_fixed_part_over_the_request_share_of_a_step() -> None:
    cost = VerifyCost(step_s=0.040, row_s=0.002, tree_s=0.004)
    assert cost.tree_cost(1) == pytest.approx(0.1)
    assert cost.tree_cost(4) == pytest.approx(4 * 0.004 / 0.046)
    assert VerifyCost(step_s=0.040, row_s=0.002).tree_cost(1) == 0.0


def test_the_plain_share_of_a_forward() -> None:
    """What decoding alone would have taken of a forward that verified draft rows (the speculation
    gate's plain step), whatever the device's speed."""
    cost = VerifyCost(step_s=0.02, row_s=0.002, tree_s=0.004)
    # 4 requests, 12 rows (8 draft rows), 2 trees: plain 0.026 s of 0.050 s
    assert cost.plain_share(4, 12, 2) == pytest.approx(0.026 / 0.050)
    slower = VerifyCost(step_s=0.04, row_s=0.004, tree_s=0.008)
    assert slower.plain_share(4, 12, 2) == pytest.approx(cost.plain_share(4, 12, 2))
    assert cost.plain_share(4, 4, 0) == 1.0
    fixed = FixedNodeCost(0.25, tree=0.5)  # in a request's shares of a step
    assert fixed.plain_share(4, 12, 2) == pytest.approx(4 / (4 + 8 * 0.25 + 2 * 0.5))
    assert FixedNodeCost(0.0).plain_share(4, 12, 2) == 1.0


def test_measuring_times_both_sizes_within_the_pool_and_the_positions(tiny_model: CausalLM) -> None:
    cache = KVCache.allocate(tiny_model.config, 8, 4, tiny_model.dtype, tiny_model.device)  # 32 slots
    cost = measure_verify_cost(tiny_model, TorchAttentionBackend(), cache, tree_nodes=64)
    assert cost.step_s > 0.0
    assert cost.row_s >= 0.0 and cost.tree_s >= 0.0
    two = measure_verify_cost(tiny_model, TorchAttentionBackend(), cache, tree_nodes=2)
    assert two.row_s >= 0.0 and two.tree_s == 0.0  # one further row: no per-row part to tell it from


def test_the_engine_sends_drafters_the_configured_node_cost(tiny_path: Path, tiny_model: CausalLM) -> None:
    drafter = BudgetRecorder(tiny_model.config.vocab_size)
    config = EngineConfig(
        model_path=tiny_path,
        max_total_tokens=512,
        speculation=SpeculationParams(),
        node_cost=0.125,
        tree_cost=0.25,
    )
    Engine(config, drafter, tiny_model).generate([greedy("a"), greedy("b")])
    assert drafter.queries
    assert {(q.budget.node_cost, q.budget.tree_cost) for q in drafter.queries} == {(0.125, 0.25)}
    assert {(q.budget.num_draft_tokens, q.budget.num_steps, q.budget.topk) for q in drafter.queries} == {
        (8, 5, 4)
    }


def test_the_engine_measures_the_cost_and_scales_it_by_the_batch(
    tiny_path: Path, tiny_model: CausalLM
) -> None:
    engine, drafter = measuring_engine(tiny_path, tiny_model)
    measured = engine.verify_cost
    assert isinstance(measured, VerifyCost) and measured.step_s > 0.0
    engine.generate([greedy("a", 4), greedy("b", 4)])  # both decode in the same steps
    sent = {(q.budget.node_cost, q.budget.tree_cost) for q in drafter.queries}
    assert sent <= {(measured.node_cost(b), measured.tree_cost(b)) for b in (1, 2)}
    assert (measured.node_cost(2), measured.tree_cost(2)) in sent


def test_without_anything_that_drafts_nothing_is_measured(tiny_path: Path, tiny_model: CausalLM) -> None:
    """No drafter and predicted outputs off: nothing is measured. Requests' predictions draft even
    without a drafter, so with them on the costs are measured as for a drafter."""
    config = EngineConfig(model_path=tiny_path, max_total_tokens=512, prediction_draft_tokens=1)
    assert not isinstance(Engine(config, None, tiny_model).verify_cost, VerifyCost)
    predicting = Engine(EngineConfig(model_path=tiny_path, max_total_tokens=512), None, tiny_model)
    assert isinstance(predicting.verify_cost, VerifyCost) and predicting.verify_cost.step_s > 0.0

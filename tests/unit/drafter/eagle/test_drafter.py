"""The EAGLE drafters in the engine, on the tiny random model with random public-format heads: greedy
output equals plain decoding, every tree respects its budget, draft probabilities are well formed."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.unit.drafter.eagle.engine_runs import (
    EAGLE,
    PLAIN,
    check_tree,
    grown_request,
    make_drafter,
    run_prompts,
    run_requests,
    tiny_engine,
)
from treespec.drafter.eagle import packed_matmul
from treespec.kernels.tree_mask import tree_depths
from treespec.shared.cli.main import build_parser
from treespec.shared.cli.plugin_flags import plugin_options
from treespec.shared.drafting.child_odds import ChildOdds
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.drafting.tree_search import SearchTree
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

# The tiny models gain nothing from threads, and on a busy 2-core machine torch's spinning threads
# make every step many times slower.
pytestmark = pytest.mark.usefixtures("one_torch_thread")

# About the median expected gain (child_odds.py) of the levels these random heads could grow: some
# levels are worth growing, some not.
MIXED_LEVEL_COST = {"eagle": 0.02, "eagle3": 0.6}


@pytest.mark.parametrize("mixed", [False, True], ids=["every-level", "levels-worth-a-step"])
@pytest.mark.parametrize("name", ["eagle", "eagle3"])
def test_greedy_output_equals_plain_decoding(
    name: str,
    mixed: bool,
    heads: dict[str, Path],
    tiny_path: Path,
    tiny_model: CausalLM,
    reference: dict[str, list[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    level_cost = MIXED_LEVEL_COST[name] if mixed else 0.0
    drafter = make_drafter(name, heads[name], tiny_model, tiny_path, level_cost=level_cost)
    gains: list[float] = []
    level_gain = SearchTree.level_gain

    def recorded(tree: SearchTree, nodes: list[int]) -> float:
        gains.append(level_gain(tree, nodes))
        return gains[-1]

    monkeypatch.setattr(SearchTree, "level_gain", recorded)
    budgets = [EAGLE, SpeculationParams(num_draft_tokens=4, num_steps=2, eagle_topk=2), EAGLE, PLAIN, EAGLE]
    # A small prefill chunk: prompts arrive over several steps, their features held until the last.
    engine = tiny_engine(tiny_path, tiny_model, drafter, chunk=8)
    results = engine.generate(run_requests(budgets))
    assert {rid: r.token_ids for rid, r in results.items()} == reference
    assert engine.stats.drafted_tokens > 0
    assert engine.num_free_blocks == engine.allocator.num_blocks
    if mixed:  # trees of one batch grown to different depths
        assert min(gains) < level_cost <= max(gains)


@pytest.mark.parametrize("matmul_dtype", ["float32", "bfloat16", "int8"])
def test_greedy_output_equals_plain_decoding_in_every_matmul_dtype(
    matmul_dtype: str,
    heads: dict[str, Path],
    tiny_path: Path,
    tiny_model: CausalLM,
    reference: dict[str, list[int]],
) -> None:
    if matmul_dtype == "bfloat16" and not packed_matmul._bf16_packing_works():
        # oneDNN multiplies bfloat16 with AVX-512 or AMX only: asked for anyway, it is refused clearly.
        with pytest.raises(ValueError, match="cannot multiply bfloat16 weights"):
            make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, matmul_dtype=matmul_dtype)
        return
    drafter = make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, matmul_dtype=matmul_dtype)
    assert drafter.head.matmul_dtype == getattr(torch, matmul_dtype)
    engine = tiny_engine(tiny_path, tiny_model, drafter)
    results = engine.generate(run_requests(EAGLE))
    assert {rid: r.token_ids for rid, r in results.items()} == reference
    assert engine.stats.drafted_tokens > 0


def test_an_unknown_matmul_dtype_is_refused(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    with pytest.raises(ValueError, match="matmul_dtype must be one of"):
        make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, matmul_dtype="float16")


@pytest.mark.parametrize("name", ["eagle", "eagle3"])
def test_trees_respect_every_budget(
    name: str, heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    rng = random.Random(3)
    drafter = make_drafter(name, heads[name], tiny_model, tiny_path)
    engine = tiny_engine(tiny_path, tiny_model, drafter)
    prompts = run_prompts()
    checked = 0
    for rid, prompt in prompts.items():
        # Plain steps through the engine (which publishes features); ask the drafter with random budgets.
        engine.add_request(
            GenerationRequest(
                rid, prompt, SamplingParams(temperature=0.0, max_new_tokens=30, ignore_eos=True), PLAIN
            )
        )
        while engine.has_work():
            engine.step()
            state = drafter._requests.get(rid)
            if state is None:
                continue
            topk = rng.randint(1, 4)
            steps = rng.randint(1, 5)
            nodes = rng.randint(2, 1 + min(topk * steps, 12))
            budget = TreeBudget(nodes, steps, topk)
            (tree,) = drafter.propose([DraftQuery(rid, budget)])
            assert tree is not None
            check_tree(tree, state.tokens[-1], budget)
            checked += 1
    assert checked > 50


def test_draft_probabilities_are_a_distribution_per_parent(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    drafter = make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path)
    no_probs = make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, draft_probs=False)
    grown_request(drafter, tiny_path, tiny_model, "p2")
    no_probs._requests["r"] = drafter._requests["r"]
    budget = TreeBudget(10, 3, 4)
    (tree,) = drafter.propose([DraftQuery("r", budget)])
    (plain,) = no_probs.propose([DraftQuery("r", budget)])
    assert tree is not None and tree.probs is not None and plain is not None and plain.probs is None
    sums: dict[int, float] = {}
    for node in range(1, tree.num_nodes):
        sums[int(tree.parents[node])] = sums.get(int(tree.parents[node]), 0.0) + float(tree.probs[node])
    assert all(abs(s - 1.0) < 1e-5 for s in sums.values())
    # The same nodes either way; only the siblings' order is drawn.
    assert sorted(tree.tokens.tolist()) == sorted(plain.tokens.tolist())


def test_unknown_request_and_missing_features_give_no_tree(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    drafter = make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path)
    drafter.open("fresh", [5, 6, 7])
    drafter.commit("fresh", [8])  # no features: a reopened request on another replica
    assert drafter.propose([DraftQuery("fresh", EAGLE.budget), DraftQuery("nobody", EAGLE.budget)]) == [
        None,
        None,
    ]
    drafter.close("nobody")


def test_wrong_format_for_the_algorithm_is_refused(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    with pytest.raises(ValueError, match="needs an eagle3 head"):
        make_drafter("eagle3", heads["eagle"], tiny_model, tiny_path)
    with pytest.raises(ValueError, match="unknown EAGLE option"):
        make_drafter("eagle", heads["eagle"], tiny_model, tiny_path, bogus=1)


def test_unlikely_nodes_are_left_out(heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM) -> None:
    drafters = {
        p: make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, min_path_prob=p)
        for p in (0.0, 0.05, 0.999999)
    }
    grown_request(drafters[0.0], tiny_path, tiny_model)
    sizes = {}
    for p, drafter in drafters.items():
        drafter._requests["r"] = drafters[0.0]._requests["r"]
        (tree,) = drafter.propose([DraftQuery("r", TreeBudget(12, 4, 4))])
        sizes[p] = 0 if tree is None else tree.num_nodes
    assert sizes[0.0] == 12 and sizes[0.05] <= 12 and sizes[0.999999] == 0
    with pytest.raises(ValueError, match="min_path_prob"):
        make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, min_path_prob=1.5)


@pytest.mark.parametrize("name", ["eagle", "eagle3"])
def test_the_default_level_cost_weighs_a_head_step_against_a_target_step(
    name: str, heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    drafter = make_drafter(name, heads[name], tiny_model, tiny_path, level_cost=None)
    head, c = drafter.head, tiny_model.config
    layer = [m for m in head.layer.modules() if isinstance(m, torch.nn.Linear)]
    per_level = sum(m.weight.numel() for m in layer)
    if name == "eagle3":  # its own lm_head; the fc reads target features only at catch-up
        per_level += head.lm_head.weight.numel()
    else:  # the fc every level, and the target's lm_head
        per_level += head.fc.weight.numel() + c.vocab_size * c.hidden_size
    assert drafter.level_cost == pytest.approx(per_level / c.step_weights)
    assert make_drafter(name, heads[name], tiny_model, tiny_path, level_cost=0.25).level_cost == 0.25
    with pytest.raises(ValueError, match="level_cost"):
        make_drafter(name, heads[name], tiny_model, tiny_path, level_cost=1.0)


def test_a_level_grows_only_while_its_children_are_expected_to_be_worth_a_head_step(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    drafters = {
        cost: make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, level_cost=cost)
        for cost in (0.0, 0.999)
    }
    grown_request(drafters[0.0], tiny_path, tiny_model)
    drafters[0.999]._requests["r"] = drafters[0.0]._requests["r"]
    budget = TreeBudget(12, 4, 3)
    depths = {}
    for cost, drafter in drafters.items():
        (tree,) = drafter.propose([DraftQuery("r", budget)])
        assert tree is not None
        depths[cost] = int(tree_depths(tree.parents).max())
    # A random head's top-3 are far from a path probability of 0.999: only the root's children.
    assert depths == {0.0: 4, 0.999: 1}
    # Between the two: a request whose odds are new has seen only the root's children when its tree
    # decides on the second level, so it expects each frontier node's children to be as likely, rank
    # by rank, as those (the root's path probability is 1): the gain is the frontier's total path
    # probability squared.
    state = drafters[0.0]._requests["r"]
    search = SearchTree(state.tokens[-1], budget)
    assert state.last_logprobs is not None
    first = search.add_children(0, state.last_logprobs, drafters[0.0]._vocab_ids)
    mass = sum(math.exp(search.scores[i]) for i in first)
    for cost, depth in ((mass * mass * 0.99, 2), (mass * mass * 1.01, 1)):
        drafter = make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, level_cost=cost)
        drafter._requests["r"] = state
        state.child_odds = ChildOdds()
        (tree,) = drafter.propose([DraftQuery("r", budget)])
        assert tree is not None and int(tree_depths(tree.parents).max()) >= depth
        if depth == 1:
            assert int(tree_depths(tree.parents).max()) == 1


def test_the_tree_flags_become_options_of_eagle_drafters_only() -> None:
    tree = ["--speculative-eagle-level-cost", "0.1", "--speculative-eagle-min-path-prob", "0.02"]
    tree += ["--speculative-eagle-matmul-dtype", "float32"]
    for command in (["serve"], ["verifier"], ["drafter", "--kind", "eagle3", "--vocab-size", "97"]):
        ns = build_parser().parse_args([*command, *tree])
        want = {"level_cost": 0.1, "min_path_prob": 0.02, "matmul_dtype": "float32"}
        assert plugin_options(ns, "EAGLE3") == plugin_options(ns, "eagle") == want
        assert plugin_options(ns, "NGRAM") == {}
        assert plugin_options(build_parser().parse_args(command), "EAGLE3") == {}


def test_a_level_that_cannot_change_the_kept_nodes_is_not_grown() -> None:
    tree = SearchTree(5, TreeBudget(4, 5, 2))  # 3 places
    kids = tree.add_children(0, torch.tensor([0.7, 0.2, 0.05, 0.05]).log(), None)  # 1: .7, 2: .2
    assert tree.can_add_kept([kids[1]])  # places left
    grand = tree.add_children(kids[0], torch.tensor([0.6, 0.3, 0.1]).log(), None)  # 3: .42, 4: .21
    assert tree.kept() == [1, 3, 4]  # the last place: .21
    assert tree.can_add_kept(grand) and not tree.can_add_kept([grand[1]]) and not tree.can_add_kept([kids[1]])
    tree.add_children(grand[1], torch.tensor([0.99, 0.01]).log(), None)  # a child ties its parent at best
    tree.add_children(kids[1], torch.tensor([0.99, 0.01]).log(), None)
    assert tree.kept() == [1, 3, 4]
    # Places count only nodes above the floor: with .3, two nodes hold places, so a third may come.
    floored = SearchTree(5, TreeBudget(4, 5, 2), min_path_prob=0.3)
    first = floored.add_children(0, torch.tensor([0.7, 0.2, 0.1]).log(), None)
    floored.add_children(first[0], torch.tensor([0.6, 0.3, 0.1]).log(), None)
    assert floored.can_add_kept([first[1]])


def test_levels_that_cannot_change_the_tree_are_skipped_and_the_trees_stay_the_same(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two drafters with the same seed on one request's state: one skips such levels, the other (its
    check always true) grows every level. Same trees, draft probabilities included; fewer head passes."""
    drafters = {
        mode: make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path) for mode in ("skip", "all")
    }
    grown_request(drafters["skip"], tiny_path, tiny_model)
    drafters["all"]._requests["r"] = drafters["skip"]._requests["r"]
    passes = dict.fromkeys(drafters, 0)
    for mode, drafter in drafters.items():
        run = drafter._run

        def counted(*args: Any, mode: str = mode, run: Any = run) -> Any:
            passes[mode] += 1
            return run(*args)

        monkeypatch.setattr(drafter, "_run", counted)
    budgets = [TreeBudget(n, steps, k) for n, steps, k in ((4, 5, 3), (6, 4, 2), (8, 5, 4), (3, 5, 2))]
    trees: dict[str, list[TokenTree | None]] = {mode: [] for mode in drafters}
    can_add_kept = SearchTree.can_add_kept
    for budget in budgets:
        for mode, drafter in drafters.items():
            check = can_add_kept if mode == "skip" else (lambda self, frontier: True)
            monkeypatch.setattr(SearchTree, "can_add_kept", check)
            trees[mode] += drafter.propose([DraftQuery("r", budget)])
    for got, want in zip(trees["skip"], trees["all"], strict=True):
        assert got is not None and want is not None
        assert torch.equal(got.tokens, want.tokens) and torch.equal(got.parents, want.parents)
        assert got.probs is not None and want.probs is not None and torch.equal(got.probs, want.probs)
    assert passes["skip"] < passes["all"]


def test_kept_nodes_pay_for_their_verify_rows() -> None:
    def search(node_cost: float, tree_cost: float = 0.0) -> SearchTree:
        tree = SearchTree(5, TreeBudget(8, 3, 2, node_cost=node_cost, tree_cost=tree_cost))
        kids = tree.add_children(0, torch.tensor([0.7, 0.2, 0.05, 0.05]).log(), None)  # 0 (.7), 1 (.2)
        tree.add_children(kids[0], torch.tensor([0.1, 0.6, 0.3]).log(), None)  # 1 (.42), 2 (.21)
        return tree

    # path probabilities .7, .42, .21, .2; nodes in creation order 1: .7, 2: .2, 3: .42, 4: .21
    assert search(0.0).kept() == [1, 2, 3, 4]
    # at 0.3 of a step per row: 1.7/1.3 = 1.31, 2.12/1.6 = 1.33, 2.33/1.9 = 1.23, 2.53/2.2 = 1.15
    pruned = search(0.3)
    assert pruned.kept() == [1, 3]
    tree = pruned.to_token_tree(None)
    assert tree.tokens.tolist() == [5, 0, 1] and tree.parents.tolist() == [-1, 0, 1]
    assert search(1.0).kept() == []  # no node pays for a whole step
    # a tree's fixed cost on top: 1.7/1.5 = 1.13, 2.12/1.8 = 1.18, 2.33/2.1 = 1.11 at 0.2 and 0.3
    assert search(0.3, tree_cost=0.2).kept() == [1, 3]
    assert search(0.3, tree_cost=0.8).kept() == []  # 2.12/2.4 < 1: plain decoding is faster

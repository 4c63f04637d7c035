"""The EAGLE drafters' engine tests' common set-up: the tiny random target's prompts and requests, an
engine over it, a drafter for a random public-format head, and the checks of a drafted tree."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from treespec.drafter.eagle.drafter import EagleDrafter
from treespec.kernels.tree_mask import tree_depths, validate_tree
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

VOCAB, HIDDEN, LAYERS = 97, 64, 3
PLAIN = SpeculationParams(enabled=False)
EAGLE = SpeculationParams(num_draft_tokens=8, num_steps=4, eagle_topk=3)


def make_drafter(name: str, head: Path, model: CausalLM, path: Path, **options: Any) -> EagleDrafter:
    """level_cost 0 unless given: a random head's flat distributions would rarely be worth a second
    level against the tiny target, and these tests are about deep trees."""
    options = {"draft_path": str(head), "level_cost": 0.0, **options}
    context = DrafterContext(VOCAB, path, options, LocalTargetAccess(model))
    drafter = create_drafter(name, context)
    assert isinstance(drafter, EagleDrafter)
    return drafter


def run_prompts() -> dict[str, list[int]]:
    rng = random.Random(1)
    return {f"p{i}": [rng.randrange(3, VOCAB) for _ in range(n)] for i, n in enumerate([1, 5, 17, 40, 9])}


def run_requests(spec: SpeculationParams | list[SpeculationParams], n: int = 40) -> list[GenerationRequest]:
    specs = spec if isinstance(spec, list) else [spec] * len(run_prompts())
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n, ignore_eos=True)
    return [
        GenerationRequest(rid, p, sampling, s)
        for (rid, p), s in zip(run_prompts().items(), specs, strict=True)
    ]


def tiny_engine(path: Path, model: CausalLM, drafter: Drafter | None, chunk: int = 512) -> Engine:
    """Verify rows are free (node cost 0) and every step drafts (no speculation gate): a measured cost,
    and the gate's verdicts, depend on the machine's load, and these tests are about what the head
    proposes; test_kept_nodes_pay_for_their_verify_rows covers the cost."""
    config = EngineConfig(
        model_path=path,
        page_size=4,
        max_total_tokens=4096,
        chunked_prefill_size=chunk,
        node_cost=0.0,
        adaptive_speculation=False,
    )
    return Engine(config, drafter, model)


def check_tree(tree: TokenTree, root: int, budget: TreeBudget, full: bool = True) -> None:
    problem = validate_tree(
        tree.tokens,
        tree.parents,
        tree.probs,
        vocab_size=VOCAB,
        max_nodes=budget.num_draft_tokens,
        max_depth=budget.num_steps,
        max_children=budget.topk,
    )
    assert problem is None, problem
    assert int(tree.tokens[0]) == root
    if full:  # the search always finds enough nodes here
        assert tree.num_nodes == budget.num_draft_tokens
    assert int(tree_depths(tree.parents).max()) <= budget.num_steps


def grown_request(
    drafter: EagleDrafter, tiny_path: Path, tiny_model: CausalLM, prompt_name: str = "p3"
) -> None:
    """Request "r" decoded a few tokens through the engine, so that the drafter holds its features."""
    engine = tiny_engine(tiny_path, tiny_model, drafter)
    prompt = run_prompts()[prompt_name]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=20, ignore_eos=True)
    engine.add_request(GenerationRequest("r", prompt, sampling, PLAIN))
    while "r" not in drafter._requests or len(drafter._requests["r"].tokens) < len(prompt) + 4:
        engine.step()

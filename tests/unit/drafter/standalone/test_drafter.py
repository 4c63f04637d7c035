"""The standalone drafter in the engine, on the tiny random target with draft models of its own: greedy
output equals plain decoding, a draft model equal to the target has every drafted token accepted,
trees respect their budgets, long prompts are read in chunks, and a full draft cache costs drafts,
never a request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from tests.unit.drafter.eagle.engine_runs import (
    EAGLE,
    PLAIN,
    VOCAB,
    check_tree,
    run_prompts,
    run_requests,
    tiny_engine,
)
from treespec.drafter.standalone.drafter import StandaloneDrafter
from treespec.shared.cli.main import build_parser
from treespec.shared.cli.plugin_flags import check_plugin_options, plugin_options
from treespec.shared.drafting.drafter import DrafterContext, DraftQuery
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.token_tree import TreeBudget
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.config import ModelConfig
from treespec.verifier.request import SpeculationParams

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CHAIN = SpeculationParams(num_draft_tokens=6, num_steps=5, eagle_topk=1)
WIDE = SpeculationParams(num_draft_tokens=12, num_steps=3, eagle_topk=4)


def make_drafter(draft: Path, target: Path, **options: Any) -> StandaloneDrafter:
    """level_cost 0 unless given: every level is grown, so that these tests see deep trees."""
    context = DrafterContext(VOCAB, target, {"draft_path": str(draft), "level_cost": 0.0, **options})
    drafter = create_drafter("standalone", context)
    assert isinstance(drafter, StandaloneDrafter)
    return drafter


@pytest.fixture(scope="module")
def reference(tiny_path: Path, tiny_model: CausalLM) -> dict[str, list[int]]:
    results = tiny_engine(tiny_path, tiny_model, None).generate(run_requests(PLAIN))
    return {rid: r.token_ids for rid, r in results.items()}


def test_a_draft_model_equal_to_the_target_has_every_drafted_token_accepted(
    tiny_path: Path, tiny_model: CausalLM, reference: dict[str, list[int]]
) -> None:
    """The draft model reads the same tokens at the same positions as the target: its greedy chain is
    the target's own continuation, so each step commits the whole chain and the bonus token. Any
    slip in the draft cache (a position, a slot, an ancestor) would cut the chain short."""
    drafter = make_drafter(tiny_path, tiny_path)
    results = tiny_engine(tiny_path, tiny_model, drafter).generate(run_requests(CHAIN))
    assert {rid: r.token_ids for rid, r in results.items()} == reference
    for result in results.values():
        stats = result.stats
        assert stats.accepted_tokens == stats.drafted_tokens > 0
        # 40 tokens: the first sampled after the prompt, then 39 in steps of at most 6.
        assert stats.verify_steps == 7


@pytest.mark.parametrize("spec", [CHAIN, EAGLE, WIDE], ids=["chain", "tree", "wide-tree"])
def test_greedy_output_equals_plain_decoding(
    spec: SpeculationParams,
    other_draft: Path,
    tiny_path: Path,
    tiny_model: CausalLM,
    reference: dict[str, list[int]],
) -> None:
    drafter = make_drafter(other_draft, tiny_path)
    engine = tiny_engine(tiny_path, tiny_model, drafter)
    results = engine.generate(run_requests(spec))
    assert {rid: r.token_ids for rid, r in results.items()} == reference
    assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens


@pytest.mark.parametrize(
    "budget",
    [
        TreeBudget(num_draft_tokens=8, num_steps=4, topk=3),
        TreeBudget(num_draft_tokens=6, num_steps=5, topk=1),
        TreeBudget(num_draft_tokens=16, num_steps=2, topk=8),
        TreeBudget(num_draft_tokens=5, num_steps=8, topk=2),
    ],
    ids=str,
)
def test_trees_respect_the_budget_with_parents_first_and_draft_probabilities(
    budget: TreeBudget, other_draft: Path, tiny_path: Path
) -> None:
    drafter = make_drafter(other_draft, tiny_path)
    prompt = run_prompts()["p3"]
    drafter.open("r", prompt)
    tree = drafter.propose([DraftQuery("r", budget)])[0]
    assert tree is not None
    check_tree(tree, prompt[-1], budget)  # validate_tree: parents before children, every limit
    assert tree.probs is not None and tree.path_probs is not None
    for parent in set(tree.parents.tolist()) - {-1}:
        siblings = tree.probs[tree.parents == parent]
        assert torch.isclose(siblings.sum(), torch.tensor(1.0), atol=1e-5)


def test_a_long_prompt_is_read_in_chunks_before_the_first_tree(other_draft: Path, tiny_path: Path) -> None:
    drafter = make_drafter(other_draft, tiny_path, prefill_chunk=16)
    prompt = run_prompts()["p3"]  # 40 tokens: three chunks
    drafter.open("r", prompt)
    query = [DraftQuery("r", TreeBudget())]
    assert drafter.propose(query) == [None]
    assert drafter.propose(query) == [None]
    tree = drafter.propose(query)[0]
    assert tree is not None and int(tree.tokens[0]) == prompt[-1]
    drafter.commit("r", [5, 6, 7])  # committed tokens are read in the next step's catch-up
    tree = drafter.propose(query)[0]
    assert tree is not None and int(tree.tokens[0]) == 7


def test_a_request_the_draft_cache_cannot_hold_decodes_plainly(
    other_draft: Path, tiny_path: Path, tiny_model: CausalLM, reference: dict[str, list[int]]
) -> None:
    """Room for 64 tokens of draft K/V: the short prompts draft, the 40-token one (80 with its output)
    runs out and decodes plainly; every output is plain decoding's, and closed requests give their
    blocks back."""
    drafter = make_drafter(other_draft, tiny_path, kv_tokens=64, page_size=16)
    engine = tiny_engine(tiny_path, tiny_model, drafter)
    results = engine.generate(run_requests(EAGLE))
    assert {rid: r.token_ids for rid, r in results.items()} == reference
    assert results["p0"].stats.drafted_tokens > 0
    assert results["p3"].stats.drafted_tokens < results["p0"].stats.drafted_tokens
    assert drafter.cache.allocator.num_free == drafter.cache.allocator.num_blocks


def test_reopen_starts_afresh_and_close_gives_the_blocks_back(other_draft: Path, tiny_path: Path) -> None:
    drafter = make_drafter(other_draft, tiny_path)
    free = drafter.cache.allocator.num_free
    drafter.open("r", run_prompts()["p3"])
    assert drafter.propose([DraftQuery("r", TreeBudget())])[0] is not None
    assert drafter.cache.allocator.num_free < free
    drafter.open("r", [3, 4])  # the verifier reopens a request after a drafter restart
    assert drafter.cache.allocator.num_free == free
    tree = drafter.propose([DraftQuery("r", TreeBudget())])[0]
    assert tree is not None and int(tree.tokens[0]) == 4
    drafter.close("r")
    drafter.close("never-opened")
    assert drafter.cache.allocator.num_free == free
    assert drafter.propose([DraftQuery("r", TreeBudget())]) == [None]


def test_a_draft_model_with_a_larger_vocabulary_drafts_only_ids_the_target_has(
    tiny_path: Path, tmp_path: Path
) -> None:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB + 40, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    torch.manual_seed(3)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # the extra ids are the likeliest: a drafter that forgot them would propose them
        model.lm_head.weight[VOCAB:] *= 50.0
    model.save_pretrained(tmp_path)
    drafter = make_drafter(tmp_path, tiny_path)
    drafter.open("r", run_prompts()["p3"])
    budget = TreeBudget(num_draft_tokens=12, num_steps=3, topk=4)
    tree = drafter.propose([DraftQuery("r", budget)])[0]
    assert tree is not None
    check_tree(tree, run_prompts()["p3"][-1], budget)  # every id below the target's VOCAB


def test_a_draft_step_costs_the_draft_models_weights_over_the_targets(
    tiny_path: Path, tmp_path: Path
) -> None:
    raw = json.loads((tiny_path / "config.json").read_text())
    transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**{**raw, "num_hidden_layers": 1})
    ).save_pretrained(tmp_path)
    context = DrafterContext(VOCAB, tiny_path, {"draft_path": str(tmp_path)})
    drafter = create_drafter("standalone", context)
    assert isinstance(drafter, StandaloneDrafter)
    want = ModelConfig.from_dir(tmp_path).step_weights / ModelConfig.from_dir(tiny_path).step_weights
    assert 0 < want < 1
    assert drafter.level_cost == pytest.approx(want)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "--speculative-draft-model-path"),
        ({"draft_path": "/x", "kv_tokens": 8, "page_size": 16}, "page_size"),
        ({"draft_path": "/x", "dtype": "int8"}, "dtype"),
        ({"draft_path": "/x", "level_cost": 1.0}, "level_cost"),
        ({"draft_path": "/x", "colour": "red"}, "unknown STANDALONE option"),
        ({"draft_path": "/nowhere"}, r"no draft model in /nowhere \(no config.json\)"),
    ],
)
def test_bad_settings_are_refused_before_a_model_loads(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_plugin_options("STANDALONE", options)


def test_the_flags_become_the_drafters_options() -> None:
    ns = build_parser().parse_args(
        [
            "serve", "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/m",
            "--speculative-draft-kv-tokens", "4096", "--speculative-draft-dtype", "bfloat16",
        ]
    )  # fmt: skip
    assert plugin_options(ns, "STANDALONE") == {"draft_path": "/m", "kv_tokens": 4096, "dtype": "bfloat16"}


def test_serve_runs_the_draft_model_in_the_drafter_process_with_a_longer_deadline(tmp_path: Path) -> None:
    """The drafter process loads the draft model and takes turns on the cores with the verifier (short
    OpenMP spins in both); a drafting step of several draft forwards gets 500 ms, not 50."""
    from treespec.shared.cli.serve import ServeConfig, services
    from treespec.shared.launcher.shared_cores import SPIN_COUNT

    ns = build_parser().parse_args(
        ["serve", "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/m"]
    )
    options = plugin_options(ns, ns.speculative_algorithm)
    config = ServeConfig.on_free_ports(tmp_path, "STANDALONE", drafter_options=options)
    processes = {p.name: p for p in services(config)}
    drafter, verifier = processes["drafter"].argv, processes["verifier"].argv
    assert drafter[drafter.index("--kind") + 1] == "STANDALONE"
    assert 'draft_path="/m"' in drafter
    assert verifier[verifier.index("--draft-deadline-ms") + 1] == "500"
    assert processes["drafter"].env == processes["verifier"].env == {"GOMP_SPINCOUNT": str(SPIN_COUNT)}
    # In the verifier's process the draft model shares no cores with another process: OpenMP's own
    # wait, which serves the verifier's forwards better (7-10% through the stack with EAGLE3 there).
    inside = ServeConfig.on_free_ports(
        tmp_path, "STANDALONE", drafter_options=options, drafter_in_process=True
    )
    assert [p.name for p in services(inside)] == ["verifier", "gateway"]
    assert not any(p.env for p in services(inside))
    ngram = {p.name: p for p in services(ServeConfig.on_free_ports(tmp_path, "NGRAM"))}
    assert ngram["verifier"].argv[ngram["verifier"].argv.index("--draft-deadline-ms") + 1] == "50"
    assert ngram["verifier"].env == {}

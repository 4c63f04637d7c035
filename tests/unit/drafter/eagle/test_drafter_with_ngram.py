"""The EAGLE-3 drafter with n-gram matches merged into its trees (--speculative-eagle-ngram), in the
engine on the tiny random model: greedy output equals plain decoding, and the merge drafts more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.drafter.eagle.engine_runs import (
    EAGLE,
    VOCAB,
    check_tree,
    make_drafter,
    run_requests,
    tiny_engine,
)
from treespec.drafter.eagle.drafter import EagleDrafter
from treespec.drafter.merged import drafter as merged_drafter
from treespec.drafter.merged.drafter import MergedDrafter
from treespec.drafter.ngram.drafter import NgramDrafter
from treespec.shared.cli.main import build_parser
from treespec.shared.cli.plugin_flags import plugin_options
from treespec.shared.drafting.drafter import DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.drafting.tree_merge import merge_trees
from treespec.shared.model.causal_lm import CausalLM

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _merged(head: Path, model: CausalLM, path: Path, **ngram: Any) -> MergedDrafter:
    options = {"draft_path": str(head), "level_cost": 0.0, "ngram": ngram}
    drafter = create_drafter("eagle3", DrafterContext(VOCAB, path, options, LocalTargetAccess(model)))
    assert isinstance(drafter, MergedDrafter)
    assert isinstance(drafter.lead, EagleDrafter) and isinstance(drafter.drafters[1], NgramDrafter)
    return drafter


def test_eagle_merged_with_ngram_matches_equals_plain_decoding_and_drafts_more(
    heads: dict[str, Path],
    tiny_path: Path,
    tiny_model: CausalLM,
    reference: dict[str, list[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    merges: list[TokenTree | None] = []

    def recorded(trees: list[TokenTree], budget: TreeBudget) -> TokenTree | None:
        merges.append(merge_trees(trees, budget))
        if merges[-1] is not None:
            check_tree(merges[-1], int(trees[0].tokens[0]), budget, full=False)
        return merges[-1]

    monkeypatch.setattr(merged_drafter, "merge_trees", recorded)
    accepted = {}
    for name, drafter in (
        ("eagle3", make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path)),
        ("merged", _merged(heads["eagle3"], tiny_model, tiny_path, min_path_prob=0.0)),
    ):
        engine = tiny_engine(tiny_path, tiny_model, drafter)
        results = engine.generate(run_requests(EAGLE))
        assert {rid: r.token_ids for rid, r in results.items()} == reference
        accepted[name] = engine.stats.accepted_tokens
    # The tiny random target repeats itself, which the n-gram matches catch and a random head does not.
    assert accepted["merged"] > accepted["eagle3"]
    assert any(t is not None and t.probs is None for t in merges)  # trees mixing both drafters' nodes


def test_the_ngram_flag_merges_ngram_trees_into_eagle_ones(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    command = ["serve", "--speculative-eagle-ngram", "--redis-url", "redis://h:1/0"]
    ns = build_parser().parse_args([*command, "--speculative-ngram-max-bfs-breadth", "3"])
    assert plugin_options(ns, "EAGLE3") == {"ngram": {"redis_url": "redis://h:1/0", "max_bfs_breadth": 3}}
    assert plugin_options(build_parser().parse_args(["serve", "--speculative-eagle-ngram"]), "EAGLE") == {
        "ngram": {}
    }
    with pytest.raises(ValueError, match="n-gram option"):
        _merged(heads["eagle3"], tiny_model, tiny_path, bogus=1)
    with pytest.raises(ValueError, match="ngram must be a dict"):
        make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, ngram=True)

"""The n-gram drafter's settings: plugin options are validated, and the CLI flags (SGLang's names) become
exactly the options given, with SGLang's n-gram tree budget as the default."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from treespec.drafter.ngram.config import NgramConfig
from treespec.shared.cli.ngram_flags import add_ngram_arguments, ngram_options
from treespec.shared.cli.speculation_flags import (
    BudgetFlags,
    add_budget_arguments,
    default_budget,
    resolve_budget,
)
from treespec.shared.drafting.token_tree import TreeBudget


def test_defaults_are_sglangs() -> None:
    config = NgramConfig.from_options({})
    assert config == NgramConfig()
    assert (config.min_match_window_size, config.max_match_window_size) == (1, 12)
    assert (config.min_bfs_breadth, config.max_bfs_breadth) == (1, 10)
    assert (config.match_type, config.branch_length) == ("BFS", 18)
    assert config.redis_url is None and not config.learn_from_prompts
    assert config.default_budget() == TreeBudget(num_draft_tokens=12, num_steps=11, topk=10)
    assert config.as_options() == {}


def test_options_are_read_and_match_type_is_case_insensitive() -> None:
    config = NgramConfig.from_options(
        {"match_type": "prob", "max_bfs_breadth": 4, "redis_url": "redis://x:1", "namespace": "n"}
    )
    assert config.match_type == "PROB"
    assert config.max_bfs_breadth == 4
    assert config.as_options() == {
        "match_type": "PROB",
        "max_bfs_breadth": 4,
        "redis_url": "redis://x:1",
        "namespace": "n",
    }
    assert config.default_budget() == TreeBudget(num_draft_tokens=12, num_steps=11, topk=4)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_bfs_breadht": 4}, "unknown n-gram option"),
        ({"speculative_ngram_max_bfs_breadth": 4}, "unknown n-gram option"),
        ({"match_type": "XYZ"}, "match_type"),
        ({"min_match_window_size": 5, "max_match_window_size": 4}, "min_match_window_size"),
        ({"min_match_window_size": 0}, "min_match_window_size"),
        ({"min_bfs_breadth": 3, "max_bfs_breadth": 2}, "min_bfs_breadth"),
        ({"branch_length": 0}, "positive"),
        ({"capacity": 0}, "positive"),
        ({"fanout": 0}, "positive"),
        ({"ttl_s": 0}, "positive"),
        ({"min_path_prob": 1.0}, "min_path_prob"),
        ({"min_path_prob": -0.1}, "min_path_prob"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NgramConfig.from_options(options)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_ngram_arguments(parser)
    add_budget_arguments(parser)
    return parser


def test_only_the_flags_given_become_options() -> None:
    ns = _parser().parse_args(
        [
            "--speculative-ngram-max-bfs-breadth",
            "4",
            "--speculative-ngram-match-type",
            "PROB",
            "--redis-url",
            "redis://x:1",
        ]
    )
    assert ngram_options(ns) == {"max_bfs_breadth": 4, "match_type": "PROB", "redis_url": "redis://x:1"}
    assert ngram_options(_parser().parse_args([])) == {}
    # every flag maps onto a field NgramConfig accepts
    ns = _parser().parse_args(
        [
            "--speculative-ngram-min-match-window-size=2",
            "--speculative-ngram-max-match-window-size=6",
            "--speculative-ngram-min-bfs-breadth=2",
            "--speculative-ngram-branch-length=9",
            "--speculative-ngram-capacity=100",
            "--speculative-ngram-ttl=60",
            "--speculative-ngram-tenant=t",
            "--speculative-ngram-min-path-prob=0.1",
            "--speculative-ngram-learn-from-prompts",
        ]
    )
    options = ngram_options(ns)
    assert options == {
        "min_match_window_size": 2,
        "max_match_window_size": 6,
        "min_bfs_breadth": 2,
        "branch_length": 9,
        "capacity": 100,
        "ttl_s": 60.0,
        "tenant": "t",
        "min_path_prob": 0.1,
        "learn_from_prompts": True,
    }
    assert NgramConfig.from_options(options).as_options() == options


def test_default_budgets_per_algorithm() -> None:
    assert default_budget("NGRAM") == BudgetFlags(num_steps=11, eagle_topk=10, num_draft_tokens=12)
    assert default_budget("ngram") == default_budget("NGRAM")
    assert default_budget("EAGLE") == BudgetFlags(num_steps=5, eagle_topk=4, num_draft_tokens=8)
    # the n-gram defaults follow the n-gram flags
    assert default_budget("NGRAM", {"max_match_window_size": 6, "max_bfs_breadth": 3}) == BudgetFlags(
        num_steps=5, eagle_topk=3, num_draft_tokens=6
    )


def test_budget_flags_given_win() -> None:
    parser = _parser()
    ns = parser.parse_args(["--speculative-num-draft-tokens", "6"])
    assert resolve_budget(ns, "NGRAM", ngram_options(ns)) == BudgetFlags(
        num_steps=5, eagle_topk=10, num_draft_tokens=6
    )
    ns = parser.parse_args(["--speculative-num-draft-tokens", "6", "--speculative-num-steps", "2"])
    assert resolve_budget(ns, "NGRAM", ngram_options(ns)) == BudgetFlags(
        num_steps=2, eagle_topk=10, num_draft_tokens=6
    )
    ns = parser.parse_args(["--speculative-ngram-max-bfs-breadth", "4", "--speculative-eagle-topk", "2"])
    assert resolve_budget(ns, "NGRAM", ngram_options(ns)) == BudgetFlags(
        num_steps=11, eagle_topk=2, num_draft_tokens=12
    )
    ns = parser.parse_args(["--speculative-num-draft-tokens", "6"])
    assert resolve_budget(ns, "EAGLE", {}) == BudgetFlags(num_steps=5, eagle_topk=4, num_draft_tokens=6)

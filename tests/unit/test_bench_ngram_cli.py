"""`treespec bench ngram`: flags to NgramBenchArgs, figures to the JSON keys (no benchmark runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from treespec.bench.ngram_bench import NgramBenchArgs, _payload, render, speculation
from treespec.bench.prompts import BenchPrompt
from treespec.bench.runs import GreedyCheck, NodeCost
from treespec.bench.throughput import Throughput
from treespec.drafter.ngram.config import NgramConfig
from treespec.shared.cli.main import build_parser, main
from treespec.verifier.request import SpeculationParams


def _args(argv: list[str]) -> NgramBenchArgs:
    return NgramBenchArgs.from_namespace(build_parser().parse_args(["bench", "ngram", *argv]))


def test_flags_build_the_args(bench_defaults: tuple[Path, Path]) -> None:
    model, prompts = bench_defaults
    args = _args(["--quick", "--json", "x", "--redis-url", "redis://h:1", "--option", "max_bfs_breadth=4"])
    assert args == NgramBenchArgs(
        model=model,
        prompts=prompts,
        per_category=2,
        max_new_tokens=128,
        json_path=Path("x"),
        threads=torch.get_num_threads(),
        node_cost=None,
        tree_cost=None,
        options={"redis_url": "redis://h:1", "max_bfs_breadth": 4},
    )
    assert args.config == NgramConfig(redis_url="redis://h:1", max_bfs_breadth=4)


def test_defaults_are_an_in_process_memory(bench_defaults: tuple[Path, Path]) -> None:
    args = _args(["--threads", "3", "--max-new-tokens", "16"])
    assert args.options == {} and args.config.redis_url is None
    assert (args.threads, args.max_new_tokens, args.per_category, args.json_path) == (3, 16, None, None)


def test_speculation_is_the_default_budget() -> None:
    config = NgramConfig(max_match_window_size=6, max_bfs_breadth=3)
    budget = config.default_budget()
    assert speculation(config) == SpeculationParams(
        num_draft_tokens=budget.num_draft_tokens, num_steps=budget.num_steps, eagle_topk=budget.topk
    )


@pytest.mark.parametrize("option", ["nope=1", "max_bfs_breadth", "max_bfs_breadth=0"])
def test_bad_options_fail_before_loading(
    bench_defaults: tuple[Path, Path], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError):
        _args(["--option", option])
    assert main(["bench", "ngram", "--option", option]) == 2
    assert "treespec bench ngram: error:" in capsys.readouterr().err


def test_payload_has_the_issue_keys(bench_defaults: tuple[Path, Path]) -> None:
    args = _args(["--redis-url", "redis://u:secret@h:1/0", "--option", "max_bfs_breadth=4"])
    tally = Throughput()
    for method, seconds, steps in (("plain", 2.0, 0), ("ngram", 1.0, 4), ("hf_pld", 1.6, 0)):
        draft_s = 0.1 if steps else 0.0
        tally.add(method, "coding", 8, seconds, steps, 8 if steps else 0, draft_s, first_token_seconds=0.5)
    prompts = [BenchPrompt(1, "coding", "hi")]
    greedy = GreedyCheck(lambda ids: torch.zeros(4))
    p = _payload(args, prompts, tally, greedy, speculation(args.config), NodeCost(0.0))
    assert {"plain_tps", "ngram_tps", "hf_pld_tps", "ngram_accept_len", "per_category"} <= set(p)
    assert p["ngram_vs_plain"] == 2.0 and p["ngram_vs_hf_pld"] == 1.6 and p["ngram_accept_len"] == 2.0
    assert p["identical"] and p["mismatches"] == [] and p["near_tie_divergences"] == 0
    assert p["per_category"]["coding"]["ngram_vs_plain"] == 2.0
    assert p["setup"]["memory"] == "redis://u:***@h:1/0"
    assert p["setup"]["ngram_options"] == {"max_bfs_breadth": 4}
    assert p["setup"]["verify_cost"] == {"node_cost": 0.0, "tree_cost": 0.0, "measured": False}
    assert _args(["--speculative-node-cost", "0.25"]).node_cost == 0.25
    assert p["ngram_draft_ms_per_step"] == 25.0 and p["ngram_draft_share"] == 0.1
    # A quarter of plain decoding's time went to the first token: what drafting cannot shorten.
    assert p["plain_first_token_share"] == 0.25 == p["per_category"]["coding"]["plain_first_token_share"]
    assert "ngram / plain: 2.00x   ngram / hf_pld: 1.60x" in render(p)
    assert "drafting: ngram 25.00 ms/step (10% of its time)" in render(p)

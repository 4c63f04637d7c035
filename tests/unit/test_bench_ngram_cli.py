"""`treespec bench ngram`: flags to NgramBenchArgs, figures to the JSON keys, and a real run on the
bundled model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.unit.bench_prompts import copy_and_qa_argv
from treespec.bench.ngram_bench import CEILING, NgramBenchArgs, _add_ceiling, _payload, render, speculation
from treespec.bench.prompts import BenchPrompt
from treespec.bench.runs import GreedyCheck, NodeCost
from treespec.bench.throughput import Tally, Throughput
from treespec.drafter.ngram.config import NgramConfig
from treespec.shared.cli.main import build_parser, main
from treespec.verifier.request import SpeculationParams


def _args(argv: list[str]) -> NgramBenchArgs:
    return NgramBenchArgs.from_namespace(build_parser().parse_args(["bench", "ngram", *argv]))


def test_flags_build_the_args(bench_defaults: tuple[Path, Path]) -> None:
    model, prompts = bench_defaults
    argv = ["--quick", "--json", "x", "--redis-url", "redis://h:1", "--option", "max_bfs_breadth=4"]
    args = _args([*argv, "--repeats", "3"])
    assert args == NgramBenchArgs(
        model=model,
        prompts=prompts,
        per_category=2,
        max_new_tokens=128,
        json_path=Path("x"),
        threads=torch.get_num_threads(),
        node_cost=None,
        tree_cost=None,
        repeats=3,
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
        gated = 1 if steps else 0  # the gate left one of NGRAM's four steps plain
        tally.add(
            method,
            "coding",
            8,
            seconds,
            steps,
            8 if steps else 0,
            draft_s,
            first_token_seconds=0.5,
            gated_steps=gated,
        )
    tally.add(CEILING, "coding", 8, 0.8, 2, 7, 0.0, first_token_seconds=0.5)
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
    assert p["ngram_gated_share"] == 0.25
    assert (
        "drafting: ngram 25.00 ms/step (10% of its time, 25% of its steps left plain by the gate)"
        in render(p)
    )
    # The copy ceiling: 7 tokens after the first in 2 steps; 10 tokens/s against plain decoding's 4.
    assert p["copy_ceiling_accept_len"] == 3.5 and p["copy_ceiling_tps"] == 10.0
    assert p["copy_ceiling_vs_plain"] == 2.5 == p["per_category"]["coding"]["copy_ceiling_vs_plain"]
    assert "acceptance 3.50, 2.50x plain" in render(p)


def test_the_copy_ceiling_is_timed_at_plain_decoding_s_steps() -> None:
    """Plain decoding's prefill, then its step for each of the ceiling's steps plus the node costs."""
    tally = Throughput()
    # 6 tokens in 1.5 s, 0.5 s of them until the first: 5 steps of 0.2 s.
    plain = Tally(tokens=6, seconds=1.5, first_token_seconds=0.5)
    # After the first token (1), the prompt's 2 3 4 follow 1: drafted in one step, 9 committed after
    # them; 8 never occurred: a step of its own.
    cost = NodeCost(0.25, tree=0.5)
    _add_ceiling(
        tally, "qa", [1, 2, 3, 4], [1, 2, 3, 4, 9, 8], plain, NgramConfig(), speculation(NgramConfig()), cost
    )
    ceiling = tally.by_category[CEILING]["qa"]
    assert (ceiling.tokens, ceiling.verify_steps, ceiling.committed) == (6, 2, 5)
    # 2 steps + 3 nodes at 0.25 + 1 tree at 0.5 = 3.25 steps of 0.2 s, after the 0.5 s prefill.
    assert ceiling.seconds == pytest.approx(0.5 + 3.25 * 0.2)
    assert ceiling.first_token_seconds == 0.5


def test_a_real_run_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = copy_and_qa_argv(tmp_path, 24)
    out = tmp_path / "out.json"
    # A fixed node cost: one measured on a busy machine can leave nothing worth drafting.
    argv += ["--speculative-node-cost", "0.05"]
    plot = tmp_path / "plots" / "ngram.png"
    assert main(["bench", "ngram", *argv, "--json", str(out), "--plot", str(plot)]) == 0
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    p = json.loads(out.read_text())
    keys = {"plain_tps", "ngram_tps", "hf_pld_tps", "ngram_accept_len", "copy_ceiling_tps"}
    assert keys | {"per_category", "identical", "setup", "copy_ceiling_accept_len"} <= set(p)
    assert set(p["per_category"]) == {"summarization", "qa"}
    assert all(p[k] > 0 for k in keys) and p["identical"], p["mismatches"]
    # The repeated sentence is there to copy: the drafter and the ceiling both find it, and the
    # ceiling is a ceiling.
    repeat = p["per_category"]["summarization"]
    assert (
        repeat["ngram_accept_len"] > 2.0 and repeat["copy_ceiling_accept_len"] >= repeat["ngram_accept_len"]
    )
    assert p["copy_ceiling_vs_plain"] > 1.0
    assert p["setup"]["verify_cost"] == {"node_cost": 0.05, "tree_cost": 0.0, "measured": False}
    assert "copy ceiling (plain's output replayed" in capsys.readouterr().out

"""`treespec bench standalone`: flags to StandaloneBenchArgs, figures to the JSON keys (no benchmark
runs; the drafter itself is tested in tests/unit/drafter/standalone)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.unit.bench_prompts import write_prompts
from treespec.bench.prompts import BenchPrompt
from treespec.bench.runs import GreedyCheck, NodeCost
from treespec.bench.standalone_bench import StandaloneBenchArgs, _payload, render
from treespec.bench.throughput import Throughput
from treespec.shared.cli.main import build_parser, main
from treespec.verifier.request import SpeculationParams


def _args(argv: list[str]) -> StandaloneBenchArgs:
    return StandaloneBenchArgs.from_namespace(build_parser().parse_args(["bench", "standalone", *argv]))


def test_flags_build_the_args(bench_defaults: tuple[Path, Path], tiny_path: Path) -> None:
    model, prompts = bench_defaults
    args = _args(["--draft-path", str(tiny_path), "--quick", "--speculative-eagle-topk", "1"])
    assert args == StandaloneBenchArgs(
        model=model,
        prompts=prompts,
        per_category=2,
        max_new_tokens=128,
        json_path=None,
        threads=torch.get_num_threads(),
        node_cost=None,
        tree_cost=None,
        repeats=1,
        options={"draft_path": str(tiny_path)},
        speculation=SpeculationParams(num_steps=5, eagle_topk=1, num_draft_tokens=8),
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--draft-path", "/nowhere"], "no draft model in /nowhere"),
        (["--draft-path", "TINY", "--speculative-tree-cost", "0.1"], "--speculative-tree-cost needs"),
    ],
)
def test_bad_arguments_exit_2_before_a_model_loads(
    bench_defaults: tuple[Path, Path],
    tiny_path: Path,
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [str(tiny_path) if a == "TINY" else a for a in argv]
    assert main(["bench", "standalone", *argv]) == 2
    err = capsys.readouterr().err
    assert "treespec bench standalone: error:" in err and message in err


def test_the_draft_path_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["bench", "standalone"])
    assert exc.value.code == 2 and "--draft-path" in capsys.readouterr().err


def test_payload_has_each_methods_figures(bench_defaults: tuple[Path, Path], tiny_path: Path) -> None:
    args = _args(["--draft-path", str(tiny_path)])
    tally = Throughput()
    for method, seconds, steps in (("plain", 2.0, 0), ("standalone", 1.0, 4), ("hf_assisted", 4.0, 0)):
        draft_s = 0.25 if steps else 0.0
        tally.add(method, "coding", 8, seconds, steps, 8 if steps else 0, draft_s, first_token_seconds=0.5)
    greedy = GreedyCheck(lambda ids: torch.zeros(4))
    p = _payload(args, [BenchPrompt(1, "coding", "hi")], tally, greedy, NodeCost(0.0))
    assert {"plain_tps", "standalone_tps", "hf_assisted_tps", "standalone_accept_len", "per_category"} <= set(
        p
    )
    assert p["standalone_vs_plain"] == 2.0 and p["standalone_vs_hf_assisted"] == 4.0
    assert p["standalone_accept_len"] == 2.0 and p["standalone_draft_share"] == 0.25
    assert p["per_category"]["coding"]["standalone_vs_plain"] == 2.0
    assert p["setup"]["draft_model"] == str(tiny_path)
    assert p["setup"]["budget"] == {"num_draft_tokens": 8, "num_steps": 5, "eagle_topk": 4}
    table = render(p)
    assert "standalone / plain: 2.00x" in table and "standalone / hf_assisted: 4.00x" in table


def test_a_run_writes_the_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """End to end on a tiny random model with SmolLM2's tokenizer, drafting for itself: every tree's
    greedy path is the target's own."""
    from tests.unit.drafter.eagle.smol_tiny import make_smol_tiny

    model = make_smol_tiny(tmp_path / "model")
    rows = [(1, "writing", "Write one line."), (2, "coding", "Print hello in C.")]
    prompts = write_prompts(tmp_path / "prompts.jsonl", rows)
    out = tmp_path / "bench.json"
    argv = [
        "bench",
        "standalone",
        "--model",
        str(model),
        "--draft-path",
        str(model),
        "--prompts",
        str(prompts),
    ]
    # Free nodes: a random model's flat drafts would not pay for a measured verify cost.
    argv += ["--max-new-tokens", "12", "--threads", "1", "--speculative-node-cost", "0", "--json", str(out)]
    assert main(argv) == 0
    p = json.loads(out.read_text())
    assert p["identical"] and set(p["per_category"]) == {"writing", "coding"}
    assert p["standalone_accept_len"] > 1.0  # a model drafting for itself is accepted
    assert "standalone greedy output equals plain's" in capsys.readouterr().out

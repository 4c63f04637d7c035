"""`treespec bench node-cost`: flags to NodeCostBenchArgs, the order the methods run in, figures to the
JSON keys and the table, and a real run on the bundled model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.unit.bench_prompts import copy_and_qa_argv
from treespec.bench import runs
from treespec.bench.node_cost_bench import (
    NodeCostBenchArgs,
    _payload,
    _run_prompt,
    _Runners,
    _Setting,
    parse_factors,
    render,
    setting_name,
)
from treespec.bench.prompts import BenchPrompt
from treespec.bench.runs import GreedyCheck, NodeCost
from treespec.bench.throughput import Throughput
from treespec.shared.cli.main import build_parser, main
from treespec.verifier.request import SpeculationParams


def _args(argv: list[str]) -> NodeCostBenchArgs:
    return NodeCostBenchArgs.from_namespace(build_parser().parse_args(["bench", "node-cost", *argv]))


def test_flags_build_the_args(bench_defaults: tuple[Path, Path]) -> None:
    model, prompts = bench_defaults
    args = _args(["--quick", "--factors", "2, 0.5,2,0", "--option", "max_bfs_breadth=4", "--threads", "3"])
    assert args == NodeCostBenchArgs(
        model=model,
        prompts=prompts,
        per_category=2,
        max_new_tokens=128,
        json_path=None,
        threads=3,
        node_cost=None,
        tree_cost=None,
        repeats=1,
        options={"max_bfs_breadth": 4},
        factors=(2.0, 0.5, 0.0),  # each once, in the order given
    )
    assert _args([]).factors == (0.0, 0.5, 1.0, 2.0, 4.0)


@pytest.mark.parametrize("text", ["", "a", "1,,2", "-1", "0.5,-0.5", "inf", "nan"])
def test_bad_factors_fail_before_loading(
    bench_defaults: tuple[Path, Path], text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="--factors"):
        parse_factors(text)
    assert main(["bench", "node-cost", "--factors", text]) == 2
    assert "treespec bench node-cost: error: --factors" in capsys.readouterr().err


def test_a_fixed_cost_is_not_a_flag_here(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "node-cost", "--speculative-node-cost", "0.1"])
    assert exit_info.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_setting_names() -> None:
    assert [setting_name(f) for f in (0.0, 0.5, 1.0, 2.0, 2.5)] == ["x0", "x0.5", "x1", "x2", "x2.5"]


def test_each_prompt_runs_the_methods_in_its_own_order(
    bench_defaults: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []

    def time_engine(engine: Any, rid: str, *rest: Any, cache_salt: str = "") -> Any:
        ran.append(rid)
        assert cache_salt == rid.rpartition("-")[0]  # each method's own salt: its own n-gram memory
        return type("Result", (), {"token_ids": [len(ran)]})()

    monkeypatch.setattr(runs, "time_engine", time_engine)
    settings = [_Setting(name, None, None, None) for name in ("online", "x0", "x2")]  # type: ignore[arg-type]
    r = _Runners(None, None, None, settings, SpeculationParams(), NodeCost(0.1))  # type: ignore[arg-type]
    args = _args(["--factors", "0,2"])

    def orders() -> list[tuple[str, ...]]:
        ran.clear()
        for i in range(8):
            outputs = _run_prompt(r, args, i, BenchPrompt(1, "qa", "hi"), [1, 2], Throughput())
            assert set(outputs) == {"plain", "online", "x0", "x2"}
        return [tuple(rid.rpartition("-")[0] for rid in ran[k : k + 4]) for k in range(0, 32, 4)]

    first = orders()
    assert all(sorted(order) == ["online", "plain", "x0", "x2"] for order in first)
    assert len(set(first)) > 2 and len({order[0] for order in first}) > 1  # not one fixed order
    assert orders() == first  # seeded: a rerun runs them alike


def test_payload_figures_and_table(bench_defaults: tuple[Path, Path]) -> None:
    args = _args(["--factors", "0,2"])
    tally = Throughput()
    # (method, category, seconds, verify steps, committed, draft nodes) for 12 tokens each
    rows = [
        ("plain", "qa", 2.0, 0, 0, 0),
        ("online", "qa", 1.5, 6, 12, 9),
        ("x0", "qa", 2.4, 6, 12, 30),
        ("x2", "qa", 1.6, 8, 12, 4),
        ("plain", "copy", 2.0, 0, 0, 0),
        ("online", "copy", 1.0, 4, 12, 16),
        ("x0", "copy", 0.8, 3, 12, 24),
        ("x2", "copy", 1.2, 5, 12, 10),
    ]
    for method, category, seconds, steps, committed, drafted in rows:
        tally.add(method, category, 12, seconds, steps, committed, drafted=drafted)
    settings = [_Setting("online", None, None, None), _Setting("x0", None, None, 0.0)]  # type: ignore[arg-type]
    settings.append(_Setting("x2", None, None, 0.5))  # type: ignore[arg-type]
    r = _Runners(None, None, None, settings, SpeculationParams(), NodeCost(0.25, 0.0, None))  # type: ignore[arg-type]
    prompts = [BenchPrompt(1, "qa", "a"), BenchPrompt(2, "copy", "b")]
    greedy = {s.name: GreedyCheck(lambda ids: torch.zeros(4)) for s in settings}
    p = _payload(args, prompts, r, tally, greedy, 0.2)
    qa, copy = p["per_category"]["qa"], p["per_category"]["copy"]
    assert qa["plain_tps"] == 6.0 and qa["online_vs_plain"] == pytest.approx(2.0 / 1.5)
    assert qa["fastest"] == "online" and copy["fastest"] == "x0"
    assert qa["x0_nodes_per_step"] == 5.0 and copy["x0_accept_len"] == 4.0
    # overall: 24 tokens in 4.0 s plain, 2.5 online, 3.2 x0, 2.8 x2
    assert p["plain_tps"] == 6.0 and p["online_tps"] == 9.6 and p["fastest"] == "online"
    assert p["x2_nodes_per_step"] == pytest.approx(14 / 13) and p["online_accept_len"] == 2.4
    assert p["settings"] == {
        "online": {"node_cost": None},
        "x0": {"node_cost": 0.0},
        "x2": {"node_cost": 0.5},
    }
    assert p["identical"] and p["near_tie_divergences"] == 0
    assert p["setup"]["factors"] == [0.0, 2.0] and p["setup"]["verify_cost"]["node_cost"] == 0.25
    text = render(p)
    assert "fastest overall: online (1.60x plain); online 1.60x plain" in text
    assert "online at the end of the run 0.200" in text
    assert "x2           0.500" in text and "online      online" in text


def test_a_real_run_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = copy_and_qa_argv(tmp_path, 16)
    out = tmp_path / "out.json"
    plot = tmp_path / "node-cost.png"
    assert (
        main(["bench", "node-cost", *argv, "--factors", "0,3", "--json", str(out), "--plot", str(plot)]) == 0
    )
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")  # a bar per setting and category
    p = json.loads(out.read_text())
    assert set(p["per_category"]) == {"summarization", "qa"}
    assert list(p["settings"]) == ["online", "x0", "x3"]
    probe = p["setup"]["verify_cost"]
    assert probe["measured"] and p["settings"]["online"]["node_cost"] is None
    assert p["settings"]["x0"]["node_cost"] == 0.0
    assert p["settings"]["x3"]["node_cost"] == pytest.approx(3 * probe["node_cost"], abs=1e-3)
    for figures in (p, *p["per_category"].values()):
        assert figures["plain_tps"] > 0 and figures["fastest"] in p["settings"]
        assert all(
            figures[f"{name}_tps"] > 0 and figures[f"{name}_accept_len"] >= 1.0 for name in p["settings"]
        )
    # free nodes: the drafter's matches in the repeated sentence are all verified
    assert p["per_category"]["summarization"]["x0_nodes_per_step"] > 0
    assert p["identical"], p["greedy"]
    assert "fastest overall:" in capsys.readouterr().out

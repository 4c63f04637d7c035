"""`treespec bench batch`: flags to BatchBenchArgs, figures to the JSON keys and the table, and a real run
on the bundled model."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

from tests.unit.bench_prompts import copy_and_qa_argv
from treespec.bench import batch_bench
from treespec.bench.batch_bench import BatchBenchArgs, _Method, _payload, parse_algorithms, render
from treespec.bench.prompts import BenchPrompt
from treespec.bench.runs import GreedyCheck
from treespec.shared.cli.main import build_parser, main
from treespec.verifier.config import EngineConfig


def _args(argv: list[str]) -> BatchBenchArgs:
    return BatchBenchArgs.from_namespace(build_parser().parse_args(["bench", "batch", *argv]))


def test_flags_build_the_args(bench_defaults: tuple[Path, Path]) -> None:
    model, prompts = bench_defaults
    args = _args(["--quick", "--batch", "4", "--speculative-algorithm", "ngram", "--rounds", "3"])
    assert args == BatchBenchArgs(
        model=model,
        prompts=prompts,
        per_category=2,
        max_new_tokens=128,
        json_path=None,
        threads=args.threads,
        node_cost=None,
        tree_cost=None,
        repeats=1,
        batch=4,
        algorithms=("NGRAM",),
        rounds=3,
    )
    assert args.methods == ["plain", "ngram", "ngram_ungated"]
    defaults = _args([])
    assert (defaults.batch, defaults.algorithms, defaults.rounds) == (8, ("EAGLE3", "NGRAM"), 2)
    assert parse_algorithms("ngram, EAGLE3,ngram") == ("NGRAM", "EAGLE3")


@pytest.mark.parametrize("text", ["", "STANDALONE", "NGRAM,medusa", ","])
def test_bad_algorithms_fail_before_loading(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="give one or more of EAGLE3, NGRAM"):
        parse_algorithms(text)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "batch", "--speculative-algorithm", text])
    assert exit_info.value.code == 2 and "EAGLE3, NGRAM" in capsys.readouterr().err


def test_payload_figures_and_table(bench_defaults: tuple[Path, Path]) -> None:
    args = _args(["--batch", "2", "--speculative-algorithm", "NGRAM", "--rounds", "1"])
    methods = {name: _Method(None, None) for name in args.methods}  # type: ignore[arg-type]
    # 100 tokens each: plain in 2 s, gated in 1.6 s (25 steps, 5 left plain), ungated in 2.5 s
    for name, seconds, steps, committed, draft_s, gated in (
        ("plain", 2.0, 100, 100, 0.0, 0),
        ("ngram", 1.6, 80, 100, 0.4, 5),
        ("ngram_ungated", 2.5, 80, 100, 0.8, 0),
    ):
        methods[name].tally.add(100, seconds, steps, committed, draft_seconds=draft_s)
        methods[name].steps, methods[name].gated_steps = 25, gated
    prompts = [BenchPrompt(1, "qa", "a"), BenchPrompt(2, "copy", "b")]
    p = _payload(args, prompts, methods, GreedyCheck(lambda ids: torch.zeros(4)))
    assert p["plain_tps"] == 50.0 and p["ngram_tps"] == 62.5 and p["ngram_ungated_tps"] == 40.0
    assert p["ngram_vs_plain"] == 1.25 and p["ngram_ungated_vs_plain"] == 0.8
    assert p["ngram_gate_gain"] == pytest.approx(62.5 / 40.0)
    assert p["ngram_accept_len"] == 1.25 and p["ngram_draft_ms_per_step"] == 5.0
    assert p["ngram_gated_share"] == 0.2 and p["ngram_ungated_gated_share"] == 0.0
    assert p["setup"]["batch_size"] == 2 and p["setup"]["waves_per_round"] == 1
    assert p["identical"]
    text = render(p)
    assert "1 waves of 2 requests at once, 1 rounds, 128 new tokens a request" in text
    assert "NGRAM: 1.56x with the gate against without" in text
    assert "ngram_ungated" in text


def test_a_real_run_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # Nodes priced low and fixed: the price the engines measure at batch 2 on a CPU where a draft row
    # costs 30% of a step (an AVX2-only EPYC) left the copy prompt's sentence undrafted in a CI run.
    monkeypatch.setattr(batch_bench, "EngineConfig", functools.partial(EngineConfig, node_cost=0.05))
    argv = copy_and_qa_argv(tmp_path, 24)
    out = tmp_path / "out.json"
    flags = ["--batch", "2", "--rounds", "1", "--speculative-algorithm", "NGRAM", "--json", str(out)]
    assert main(["bench", "batch", *argv, *flags]) == 0
    p = json.loads(out.read_text())
    assert p["plain_tps"] > 0 and p["ngram_tps"] > 0 and p["ngram_ungated_tps"] > 0
    # Without the gate every step speculates, so the copy prompt's sentence, drafted from the
    # prompt, is accepted; with it the gate may judge plain steps faster on a short run and take them.
    assert p["ngram_ungated_accept_len"] > 1.0
    assert p["ngram_accept_len"] >= 1.0 and 0.0 <= p["ngram_gated_share"] <= 1.0
    assert p["ngram_ungated_gated_share"] == 0.0
    assert p["identical"], p["mismatches"]
    assert p["setup"]["batch_size"] == 2 and p["setup"]["speculative_algorithms"] == ["NGRAM"]
    assert "with the gate against without" in capsys.readouterr().out

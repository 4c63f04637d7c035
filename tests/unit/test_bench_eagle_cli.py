"""`treespec bench eagle`: flags to EagleBenchArgs, figures to the JSON keys and targets, and one real
run (the bundled SmolLM2 with a random EAGLE-3 head, two one-line prompts, a few tokens)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.unit.bench_prompts import write_prompts
from tests.unit.drafter.eagle.public_checkpoints import write_eagle3
from treespec.bench.eagle_bench import METHODS, EagleBenchArgs, _payload, _waiting_line, render
from treespec.bench.prompts import BenchPrompt
from treespec.bench.runs import GreedyCheck, NodeCost
from treespec.bench.throughput import Throughput
from treespec.drafter.eagle.config import SHIPPED_HEADS
from treespec.drafter.eagle.head_config import EagleFormat
from treespec.shared.cli.main import build_parser, main
from treespec.shared.launcher.shared_cores import SPIN_COUNT, openmp_wait, shared_core_env
from treespec.shared.model.store import (
    models_dir,
    resolve_model_path,
)
from treespec.verifier.request import SpeculationParams
from treespec.verifier.verify_cost import VerifyCost

# SmolLM2-135M-Instruct's shape
HIDDEN, VOCAB, LAYERS = 576, 49152, 30
ISSUE_KEYS = {
    "plain_tps",
    "eagle3_tps",
    "eagle3_colocated_tps",
    "eagle3_accept_len",
    "ngram_tps",
    "hf_greedy_tps",
}


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random EAGLE-3 head that fits SmolLM2-135M-Instruct."""
    return write_eagle3(tmp_path_factory.mktemp("head"), HIDDEN, VOCAB, LAYERS, draft_vocab=512)


def _args(argv: list[str]) -> EagleBenchArgs:
    return EagleBenchArgs.from_namespace(build_parser().parse_args(["bench", "eagle", *argv]))


def test_flags_build_the_args(bench_defaults: tuple[Path, Path], head: Path) -> None:
    model, prompts = bench_defaults
    argv = ["--quick", "--json", "x", "--draft-path", str(head), "--draft-deadline", "7.5"]
    argv += ["--speculative-node-cost", "0.04", "--speculative-tree-cost", "0.02", "--repeats", "3"]
    args = _args([*argv, "--speculative-num-steps", "3", "--speculative-eagle-topk", "2"])
    assert args == EagleBenchArgs(
        model=model,
        prompts=prompts,
        per_category=2,
        max_new_tokens=128,
        json_path=Path("x"),
        threads=torch.get_num_threads(),
        node_cost=0.04,
        tree_cost=0.02,
        repeats=3,
        options={"draft_path": str(head)},
        speculation=SpeculationParams(num_steps=3, eagle_topk=2, num_draft_tokens=8),
        deadline_s=7.5,
    )
    assert args.head_path == head
    assert _args(["--speculative-draft-model-path", str(head)]).options == {"draft_path": str(head)}
    tree = ["--speculative-eagle-level-cost", "0", "--speculative-eagle-min-path-prob", "0.03"]
    tree += ["--speculative-eagle-matmul-dtype", "bfloat16"]
    assert _args(["--draft-path", str(head), *tree]).options == {
        "draft_path": str(head),
        "level_cost": 0.0,
        "min_path_prob": 0.03,
        "matmul_dtype": "bfloat16",
    }


def test_defaults_are_the_shipped_head_and_sglangs_budget(
    bench_defaults: tuple[Path, Path], head: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(SHIPPED_HEADS, EagleFormat.EAGLE3, head)
    args = _args(["--threads", "3", "--max-new-tokens", "16"])
    assert args.options == {} and args.head_path == head
    assert args.speculation == SpeculationParams(num_steps=5, eagle_topk=4, num_draft_tokens=8)
    assert (args.threads, args.max_new_tokens, args.per_category, args.deadline_s) == (3, 16, None, 30.0)
    assert args.node_cost is None  # measured in the run


@pytest.mark.parametrize(
    "argv",
    [
        ["--speculative-eagle-level-cost", "1.5"],
        ["--speculative-eagle-min-path-prob", "-0.1"],
        ["--draft-path", "/nonexistent/head"],
    ],
)
def test_bad_flags_fail_before_loading(
    bench_defaults: tuple[Path, Path], head: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--draft-path", str(head), *argv]  # the last --draft-path wins
    with pytest.raises(ValueError):
        _args(argv)
    assert main(["bench", "eagle", *argv]) == 2
    assert "treespec bench eagle: error:" in capsys.readouterr().err


def test_no_shipped_head_fails_before_loading(
    bench_defaults: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(SHIPPED_HEADS, EagleFormat.EAGLE3, tmp_path / "missing")
    assert main(["bench", "eagle"]) == 2


def test_payload_has_the_issue_keys_and_targets(bench_defaults: tuple[Path, Path], head: Path) -> None:
    args = _args(["--draft-path", str(head)])
    tally = Throughput()
    # tokens 12 each; (seconds, verify steps): eagle3 accepts 3 per step, 2x plain, 3x HF
    runs_ = {
        "plain": (2.0, 0),
        "eagle3": (1.0, 4),
        "eagle3_colocated": (1.25, 6),
        "eagle3_ngram": (0.8, 3),
        "ngram": (1.5, 6),
        "hf_greedy": (3.0, 0),
    }
    assert set(runs_) == set(METHODS)
    for method, (seconds, steps) in runs_.items():
        drafting = seconds / 4 if steps else 0.0
        tally.add(method, "coding", 12, seconds, steps, 12 if steps else 0, draft_seconds=drafting)
    prompts = [BenchPrompt(1, "coding", "hi")]
    speculative = ("eagle3", "eagle3_colocated", "eagle3_ngram", "ngram")
    checks = {m: GreedyCheck(lambda ids: torch.zeros(4)) for m in speculative}
    measured = NodeCost(0.05, 0.025, VerifyCost(step_s=0.04, row_s=0.002, tree_s=0.001))
    p = _payload(args, prompts, tally, checks, SpeculationParams(num_steps=7, num_draft_tokens=8), measured)
    assert ISSUE_KEYS | {"per_category"} <= set(p)
    assert set(p["per_category"]["coding"]) >= ISSUE_KEYS
    assert p["eagle3_accept_len"] == 3.0 and p["eagle3_vs_plain"] == 2.0 and p["eagle3_vs_hf"] == 3.0
    assert p["eagle3_colocated_vs_eagle3"] == pytest.approx(0.8) and p["eagle3_colocated_accept_len"] == 2.0
    assert p["eagle3_ngram_accept_len"] == 4.0 and p["eagle3_ngram_vs_plain"] == 2.5
    assert p["eagle3_ngram_vs_hf"] == 3.75 and p["eagle3_ngram_tps"] == 15.0
    targets = {k: v["pass"] for k, v in p["targets"].items()}
    assert targets == {
        "eagle3_accept_len": True,
        "eagle3_vs_plain": True,
        "eagle3_vs_hf": True,
        "eagle3_colocated_vs_eagle3": False,  # 20% slower than in process
    }
    assert not p["targets_pass"] and p["per_category"]["coding"]["targets"] == p["targets"]
    assert p["identical"] and p["near_tie_divergences"] == 0 and set(p["greedy"]) == set(checks)
    setup = p["setup"]
    assert setup["eagle3_head"] == str(head) and setup["draft_deadline_s"] == 30.0
    assert setup["eagle3_budget"] == {"num_steps": 5, "eagle_topk": 4, "num_draft_tokens": 8}
    assert setup["ngram_budget"]["num_steps"] == 7
    assert setup["verify_cost"] == {
        "node_cost": 0.05,
        "tree_cost": 0.025,
        "measured": True,
        "step_ms": 40.0,
        "row_ms": 2.0,
        "tree_ms": 1.0,
    }
    # drafting: a quarter of each speculative method's time, over its verify steps
    assert p["eagle3_draft_ms_per_step"] == 62.5 and p["eagle3_draft_share"] == 0.25
    assert p["ngram_draft_ms_per_step"] == 62.5 and p["eagle3_colocated_draft_share"] == 0.25
    text = render(p)
    assert "eagle3 / plain: 2.00x   eagle3 / hf: 3.00x   co-located / in-process: 0.80x" in text
    assert p["eagle3_gated_share"] == 0.0
    assert "drafting: eagle3 62.50 ms/step (25% of its time, 0% of its steps left plain by the gate)" in text
    assert "   eagle3_colocated 52.08 ms/step" in text
    assert "3.00 pass" in text and "0.80 FAIL" in text and "targets: FAIL" in text
    assert "eagle3+ngram / plain: 2.50x   eagle3+ngram / hf: 3.75x   eagle3+ngram accept: 4.00" in text
    assert "eagle3_colocated greedy output equals plain's (near-tie rule): True" in text
    assert "OpenMP waits: this process" in text and setup["colocated_openmp_wait"] in text


def test_a_real_run_writes_the_json(
    head: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every method on the real model, interleaved: outputs equal plain's, figures for each."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = [(1, "coding", "Write a haiku about code."), (2, "math", "What is 2 + 2?")]
    prompts = write_prompts(tmp_path / "prompts.jsonl", rows)
    out = tmp_path / "out.json"
    model = str(resolve_model_path(None, models_dir()))
    argv = ["--model", model, "--prompts", str(prompts), "--max-new-tokens", "6", "--threads", "2"]
    assert main(["bench", "eagle", *argv, "--draft-path", str(head), "--json", str(out)]) == 0
    p = json.loads(out.read_text())
    assert ISSUE_KEYS | {"per_category", "targets", "greedy"} <= set(p)
    assert set(p["per_category"]) == {"coding", "math"}
    assert all(p[k] > 0 for k in ISSUE_KEYS) and p["eagle3_accept_len"] >= 1.0
    assert 0 < p["eagle3_draft_share"] < 1 and p["eagle3_draft_ms_per_step"] > 0
    assert p["identical"], p["greedy"]
    assert p["setup"]["prompts"] == 2 and p["setup"]["batch_size"] == 1
    text = capsys.readouterr().out
    assert "co-located tok/s" in text and "eagle3 accept >= 3.0" in text and f"wrote {out}" in text
    assert p["eagle3_ngram_tps"] > 0 and p["greedy"]["eagle3_ngram"]["identical"]


def test_the_report_says_how_each_side_of_the_colocated_pair_waited(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's co-located drafter process is started as `treespec serve` starts it (short spin-waits);
    the bench process waits as its own environment says, and the report tells which is which."""
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    assert openmp_wait(os.environ) == "libgomp's default"
    drafter = openmp_wait(shared_core_env(os.environ))
    assert drafter == f"GOMP_SPINCOUNT={SPIN_COUNT}"
    line = _waiting_line({"openmp_wait": "libgomp's default", "colocated_openmp_wait": drafter})
    assert f"this process libgomp's default, the co-located drafter {drafter} (run with {drafter}" in line
    same = _waiting_line({"openmp_wait": drafter, "colocated_openmp_wait": drafter})
    assert same == f"OpenMP waits: this process {drafter}, the co-located drafter {drafter}"
    assert openmp_wait({"OMP_WAIT_POLICY": "passive"}) == "OMP_WAIT_POLICY=passive"


_SETTING_AFTER_WAIT = (
    "import os, sys\n"
    "if sys.argv[1] == 'torch-first': import torch\n"
    "from treespec.shared.cli.bench import _wait_as_colocated\n"
    "_wait_as_colocated()\n"
    "print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))\n"
)


@pytest.mark.parametrize(
    ("preset", "order", "expected"),
    [
        ({}, "cli-first", f"{SPIN_COUNT} None"),
        ({"OMP_WAIT_POLICY": "passive"}, "cli-first", "None passive"),
        ({"GOMP_SPINCOUNT": "7"}, "cli-first", "7 None"),
        ({}, "torch-first", "None None"),
    ],
)
def test_the_bench_process_waits_as_a_colocated_verifier_unless_told_or_too_late(
    preset: dict[str, str], order: str, expected: str
) -> None:
    """`bench eagle` sets the co-located verifier's short spin-waits in its own process before torch
    (and libgomp, which reads the setting once) loads; the user's own setting stands, and a process
    that loaded torch already is left as it is (its record then says how it really waits)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(preset)
    command = [sys.executable, "-c", _SETTING_AFTER_WAIT, order]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == expected

"""`treespec bench serve` end to end on SmolLM2 with two prompts of its own: the in-process engine, the
n-gram stack as `treespec serve` links its drafter (a local socket) and a plain stack, both up at
once; the table and the JSON figures of each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers

from treespec.bench.prompts import chat_prompt_ids
from treespec.bench.serve_bench import ServeBenchArgs, _engine_tps
from treespec.shared.cli.main import build_parser, main

pytestmark = pytest.mark.slow
PROMPTS = [
    {"question_id": 1, "category": "qa", "turns": ["Name three rivers in Europe."]},
    {"question_id": 2, "category": "writing", "turns": ["Write two lines about rain on a window."]},
]


def test_bench_serve_compares_the_stacks(
    smollm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    out = tmp_path / "serve.json"
    argv = [
        "bench",
        "serve",
        "--model",
        str(smollm_path),
        "--prompts",
        str(prompts),
        "--max-new-tokens",
        "12",
    ]
    argv += ["--speculative-algorithm", "NGRAM", "--concurrency", "2"]
    assert main([*argv, "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["setup"]["stacks"] == ["local", "plain"]  # as treespec serve links it, and plain
    for path in figures["paths"].values():
        assert path["tps"] > 0 and path["concurrent_tps"] > 0 and path["ttft_ms"] > 0
    assert figures["serve_tps"] == figures["paths"]["local"]["tps"]
    assert figures["concurrent2_tps"] == figures["paths"]["local"]["concurrent_tps"]
    for key in ("engine_tps", "serve_vs_engine", "serve_vs_plain", "concurrent_vs_plain"):
        assert figures[key] > 0
    assert "local_vs_grpc" not in figures  # no gRPC stack asked for (its wiring: tests/unit)
    assert all(v > 0 for v in figures["gateway_cpu_ms_per_token"].values())  # read from /proc
    table = capsys.readouterr().out
    assert "HTTP: NGRAM, drafter over a local socket" in table and "HTTP: plain decoding" in table


def test_the_in_process_engine_drafts_with_eagle3(smollm_path: Path, tmp_path: Path) -> None:
    """The run's in-process engine hands an EAGLE drafter its target (it once failed before any stack
    started: "the EAGLE drafter reads the target")."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps(PROMPTS[0]) + "\n")
    argv = ["bench", "serve", "--model", str(smollm_path), "--prompts", str(prompts), "--max-new-tokens", "6"]
    ns = build_parser().parse_args([*argv, "--speculative-algorithm", "EAGLE3"])
    args = ServeBenchArgs.from_namespace(ns)
    tokenizer = transformers.AutoTokenizer.from_pretrained(smollm_path)
    assert _engine_tps(args, [chat_prompt_ids(tokenizer, "Name three rivers in Europe.")]) > 0

"""`treespec bench prefix` end to end on SmolLM2 with two prompts of its own: the table, the JSON keys,
turn 2 found cached, and the same output with and without the cache; plain, and with EAGLE3 and
STANDALONE drafting (SmolLM2 drafting for itself, its draft K/V cached with the target's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from treespec.shared.cli.main import main

pytestmark = pytest.mark.slow
PROMPTS = [
    {"question_id": 1, "category": "qa", "turns": ["Name three rivers in Europe."]},
    {"question_id": 2, "category": "writing", "turns": ["Write two lines about rain on a window."]},
]


@pytest.mark.parametrize("algorithm", ["NONE", "EAGLE3", "STANDALONE"])
def test_bench_prefix_writes_its_figures(
    smollm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], algorithm: str
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    out = tmp_path / "prefix.json"
    argv = ["bench", "prefix", "--model", str(smollm_path), "--prompts", str(prompts)]
    argv += ["--speculative-algorithm", algorithm, "--max-new-tokens", "12", "--threads", "2"]
    if algorithm == "STANDALONE":
        argv += ["--draft-path", str(smollm_path)]
    if (
        algorithm != "NONE"
    ):  # a given node cost: one measured on a busy machine can leave nothing worth drafting
        argv += ["--speculative-node-cost", "0.05"]
    assert main([*argv, "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert set(figures["per_category"]) == {"qa", "writing"}
    for key in ("prompt_tokens", "cached_tokens", "uncached_ttft_ms", "cached_ttft_ms", "ttft_speedup"):
        assert key in figures and all(key in c for c in figures["per_category"].values())
    # Turn 2 holds turn 1's prompt: at least its whole blocks are found.
    assert figures["cached_tokens"] >= 16 * len(PROMPTS)
    assert figures["cached_tokens"] < figures["prompt_tokens"]
    assert figures["identical"] is True
    assert figures["setup"]["speculative_algorithm"] == algorithm
    if algorithm == "NONE":
        assert figures["cached_accept_len"] == figures["uncached_accept_len"] == 1.0  # one token a step
    else:  # both engines drafted, the cached one from the cached prefix's features too
        assert figures["cached_accept_len"] > 1.0 and figures["uncached_accept_len"] > 1.0
    assert "time to first token" in capsys.readouterr().out

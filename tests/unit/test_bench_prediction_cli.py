"""`treespec bench prediction`: a real run on the bundled model writes the figures, and every
speculative output equals plain decoding's."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from tests.unit.bench_prompts import write_prompts
from treespec.bench import runs
from treespec.shared.cli.main import main
from treespec.shared.launcher.heap_freeze import freeze_heap
from treespec.shared.model.store import models_dir, resolve_model_path

KEYS = {
    "plain_tps",
    "prediction_tps",
    "ngram_tps",
    "ngram_prediction_tps",
    "prediction_accept_len",
    "ngram_prediction_accept_len",
    "prediction_used",
}


def test_a_real_run_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = [(1, "coding", "Write a Python function that adds two numbers."), (2, "qa", "Name three colours.")]
    prompts = write_prompts(tmp_path / "prompts.jsonl", rows)
    out = tmp_path / "out.json"
    model = str(resolve_model_path(None, models_dir()))
    argv = ["--model", model, "--prompts", str(prompts), "--max-new-tokens", "24", "--threads", "2"]
    frozen: list[int] = []

    def freeze() -> int:
        frozen.append(freeze_heap())
        return frozen[-1]

    monkeypatch.setattr(runs, "freeze_heap", freeze)
    assert main(["bench", "prediction", *argv, "--json", str(out)]) == 0
    # The heap was frozen for the timed runs (after the warm-up) and returned to the collector after.
    assert len(frozen) == 1 and frozen[0] > 0 and gc.get_freeze_count() == 0
    p = json.loads(out.read_text())
    assert KEYS | {"per_category", "identical", "setup"} <= set(p)
    assert set(p["per_category"]) == {"coding", "qa"}
    assert all(p[k] > 0 for k in KEYS)
    assert p["identical"], p["mismatches"]
    # The rewrites repeat their prediction for the most part, and the chains find it.
    assert p["prediction_used"] > 0.5 and p["prediction_accept_len"] > 2.0
    assert p["setup"]["prompts"] == 2 and p["setup"]["task"].startswith("Rewrite")
    text = capsys.readouterr().out
    assert "prediction / plain:" in text and f"wrote {out}" in text

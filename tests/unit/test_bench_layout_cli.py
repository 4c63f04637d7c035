"""`treespec bench layout` on the tiny model: the table, the JSON figures of every layout, the layouts
it compared, and a clear error for bad row counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from treespec.shared.cli.main import main


def test_bench_layout_writes_its_figures(
    tiny_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "layout.json"
    argv = ["bench", "layout", "--model", str(tiny_path), "--rows", "4,1,2", "--context", "20"]
    assert main([*argv, "--repeats", "1", "--threads", "1", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert set(figures["forward_ms"]) == {"panels", "panels-loop", "panels-f32", "sdpa", "library", "dense"}
    for by_rows in figures["forward_ms"].values():
        assert set(by_rows) == {"1", "2", "4"} and all(ms > 0 for ms in by_rows.values())
    assert set(figures["row_cost"]["panels"]) == {"2", "4"}
    # The tiny model's random weights have no exact narrower form: float32 panels either way.
    assert figures["layouts"]["panels"] == "PanelWeight[float32]" and figures["layouts"]["dense"] == "dense"
    assert figures["layouts"]["panels-f32"] == "PanelWeight[float32]"
    assert figures["layouts"]["sdpa"] == "PanelWeight[float32]"  # the panel model, its rows attended by SDPA
    assert figures["setup"]["context"] == 20
    table = capsys.readouterr().out
    assert "panels ms" in table and "library/panels" in table and "sdpa/panels" in table
    assert "panels-loop/panels" in table and "panels-loop: the Python loop" in table


def test_bench_layout_refuses_bad_rows(tiny_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "layout", "--model", str(tiny_path), "--rows", "0,2"]) == 2
    assert main(["bench", "layout", "--model", str(tiny_path), "--rows", "two"]) == 2
    assert "--rows" in capsys.readouterr().err

"""`treespec bench prefill` on the tiny model: the table, the JSON figures of both variants for every
prompt length, and a clear error for bad lengths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from treespec.shared.cli.main import main


def test_bench_prefill_writes_its_figures(
    tiny_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "prefill.json"
    argv = ["bench", "prefill", "--model", str(tiny_path), "--tokens", "70,20", "--chunk", "32"]
    assert main([*argv, "--repeats", "1", "--threads", "1", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    for key in ("prefill_ms", "tokens_per_s"):
        assert set(figures[key]) == {"kernel", "sdpa"}
        for by_tokens in figures[key].values():
            assert set(by_tokens) == {"20", "70"} and all(v > 0 for v in by_tokens.values())
    assert set(figures["sdpa_over_kernel"]) == {"20", "70"}
    assert figures["setup"]["chunk"] == 32
    table = capsys.readouterr().out
    assert "kernel ms" in table and "sdpa/kernel" in table and "chunks of 32" in table


def test_bench_prefill_refuses_bad_lengths(tiny_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "prefill", "--model", str(tiny_path), "--tokens", "0,20"]) == 2
    assert main(["bench", "prefill", "--model", str(tiny_path), "--tokens", "many"]) == 2
    assert "--tokens" in capsys.readouterr().err

"""`--plot PATH` on the per-category bench verbs: which figures are drawn (tokens/s of each method, by
category and overall), the PNG written, and a missing matplotlib refused before anything is measured."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from matplotlib import image

from treespec.bench.ngram_bench import CEILING, NgramBenchArgs, _payload, speculation
from treespec.bench.plot import OVERALL, PlotError, check_plotting, tps_series, write_plot
from treespec.bench.prompts import BenchPrompt
from treespec.bench.runs import GreedyCheck, NodeCost
from treespec.bench.throughput import Throughput
from treespec.shared.cli.main import build_parser, main


def ngram_payload() -> dict[str, object]:
    """What `bench ngram` reports for two categories (plain 4 and 2 tokens/s, NGRAM twice as fast)."""
    args = NgramBenchArgs.from_namespace(build_parser().parse_args(["bench", "ngram"]))
    tally = Throughput()
    for category, seconds in (("coding", 2.0), ("rag", 4.0)):
        for method, share, steps in (
            ("plain", 1.0, 0),
            ("ngram", 0.5, 4),
            ("hf_pld", 0.8, 0),
            (CEILING, 0.4, 2),
        ):
            tally.add(
                method, category, 8, seconds * share, steps, 8 if steps else 0, 0.0, first_token_seconds=0.1
            )
    prompts = [BenchPrompt(1, "coding", "hi"), BenchPrompt(2, "rag", "hi")]
    greedy = GreedyCheck(lambda ids: torch.zeros(4))
    return _payload(args, prompts, tally, greedy, speculation(args.config), NodeCost(0.0))


def test_each_method_s_tokens_per_second_by_category_then_overall(bench_defaults: tuple[Path, Path]) -> None:
    series = tps_series(ngram_payload())
    assert series.groups == ("coding", "rag", OVERALL)
    assert list(series.methods) == ["plain", "ngram", "hf_pld", "copy_ceiling"]
    assert series.methods["plain"] == (4.0, 2.0, pytest.approx(16 / 6))
    assert series.methods["ngram"] == (8.0, 4.0, pytest.approx(16 / 3))


def test_only_figures_every_group_has_are_drawn() -> None:
    payload = {
        "a_tps": 1.0,
        "b_tps": 2.0,  # missing in a category
        "ok": True,
        "flag_tps": True,  # not a figure
        "per_category": {"x": {"a_tps": 3.0, "flag_tps": True}, "y": {"a_tps": 4.0, "b_tps": 5.0}},
    }
    assert tps_series(payload).methods == {"a": (3.0, 4.0, 1.0)}
    with pytest.raises(PlotError, match="no per-category figures"):
        tps_series({"a_tps": 1.0})
    with pytest.raises(PlotError, match="no tokens/s"):
        tps_series({"per_category": {"x": {"ttft_ms": 3.0}}, "ttft_ms": 3.0})


def test_the_plot_is_a_png_sized_for_its_bars(tmp_path: Path, bench_defaults: tuple[Path, Path]) -> None:
    path = tmp_path / "out" / "plot.png"
    write_plot(path, ngram_payload(), "bench ngram")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    height, width, _ = image.imread(path).shape
    assert (width, height) == (720, 540)  # 6 x 4.5 inches at 120 dpi: 3 groups of 4 bars fit the minimum
    figures = {"a_tps": 1.0, "b_tps": 1.0}
    wide = {"per_category": {f"c{k}": figures for k in range(12)}, **figures}
    write_plot(path, wide, "13 groups of 2")
    assert image.imread(path).shape[1] == (0.25 * 13 * 2 + 1.5) * 120
    many = {"per_category": {f"c{k}": figures for k in range(40)}, **figures}
    write_plot(path, many, "41 groups of 2: as wide as a page shows")
    assert image.imread(path).shape[1] == 16 * 120


def test_no_matplotlib_is_refused_before_the_run(
    bench_defaults: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an install without treespec[plots] has
    with pytest.raises(PlotError, match=r"treespec\[plots\]"):
        check_plotting()
    # the prompts file is empty: a run that went ahead would fail otherwise
    assert main(["bench", "ngram", "--plot", "x.png"]) == 2
    assert "treespec bench ngram: error: --plot needs matplotlib" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["engine", "ngram", "prediction", "eagle", "standalone"])
def test_the_per_category_verbs_take_plot(verb: str) -> None:
    argv = ["bench", verb, "--plot", "p.png"] + (["--draft-path", "d"] if verb == "standalone" else [])
    assert build_parser().parse_args(argv).plot == "p.png"


@pytest.mark.parametrize("verb", ["prefix", "serve", "layout", "prefill"])
def test_verbs_without_tokens_per_second_by_category_do_not(verb: str) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", verb, "--plot", "p.png"])

"""`treespec bench burst` end to end on SmolLM2 with two prompts of its own: the table, the JSON keys,
the burst's size, and the same outputs after the burst as before it; and its refusals before a model
loads (a fixed node cost would leave nothing to measure)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from treespec.shared.cli.main import main

pytestmark = pytest.mark.slow
PROMPTS = [
    {"question_id": 1, "category": "qa", "turns": ["Name three rivers in Europe."]},
    {"question_id": 2, "category": "copy", "turns": ["Repeat exactly: red, green, blue, red, green, blue."]},
]


def test_bench_burst_writes_its_figures(
    smollm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    out = tmp_path / "burst.json"
    argv = ["bench", "burst", "--model", str(smollm_path), "--prompts", str(prompts), "--threads", "2"]
    argv += ["--burst", "3", "--waves", "2", "--max-new-tokens", "12", "--json", str(out)]
    assert main(argv) == 0
    figures = json.loads(out.read_text())
    assert set(figures["per_category"]) == {"qa", "copy"}
    keys = ("before_tps", "after_tps", "after_over_before", "before_accept_len", "after_accept_len")
    for key in keys:
        assert figures[key] > 0 and all(c[key] > 0 for c in figures["per_category"].values())
    assert figures["after_over_before"] == pytest.approx(figures["after_tps"] / figures["before_tps"])
    assert figures["burst_requests"] == 6 and figures["burst_tps"] > 0
    # the costs the engine measured and refined (timed on this machine, so no order between them is
    # certain): a node's share of a step of 3 decodes is 3r / (s + 2r), below 3/2 for any step s > 0
    assert 0 <= figures["burst_node_cost"] < 1.5
    assert all(0 <= figures[key] < math.inf for key in ("before_node_cost", "after_node_cost"))
    assert figures["identical"] is True
    assert figures["setup"]["burst"] == 3 and figures["setup"]["waves"] == 2
    assert "after the burst" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--burst", "0"], "--burst"), (["--speculative-node-cost", "0.1"], "unrecognized arguments")],
)
def test_bench_burst_refuses_bad_flags(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "burst", *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err

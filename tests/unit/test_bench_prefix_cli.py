"""`treespec bench prefix`: the drafter flags to PrefixBenchArgs, and the refusals that come before a
model loads (the bench itself runs in tests/e2e/test_bench_prefix.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from treespec.bench.prefix_bench import PrefixBenchArgs
from treespec.shared.cli.main import build_parser, main


def test_standalone_takes_the_draft_path(bench_defaults: tuple[Path, Path], tiny_path: Path) -> None:
    ns = build_parser().parse_args(
        ["bench", "prefix", "--speculative-algorithm", "standalone", "--draft-path", str(tiny_path)]
    )
    args = PrefixBenchArgs.from_namespace(ns)
    assert (args.algorithm, args.draft_path, args.speculates) == ("STANDALONE", str(tiny_path), True)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--speculative-algorithm", "STANDALONE"], "--speculative-draft-model-path"),
        (["--speculative-algorithm", "STANDALONE", "--draft-path", "/nowhere"], "no draft model in /nowhere"),
        (["--speculative-algorithm", "NGRAM", "--draft-path", "/m"], "--draft-path is for"),
    ],
)
def test_bad_drafter_arguments_exit_2_before_a_model_loads(
    bench_defaults: tuple[Path, Path], argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "prefix", *argv]) == 2
    err = capsys.readouterr().err
    assert "treespec bench prefix: error:" in err and message in err

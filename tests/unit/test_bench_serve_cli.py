"""`treespec bench serve`: which stacks a run serves through (as `treespec serve` links its drafter, over
gRPC, plainly), how each is configured, and the ratios its table and JSON report (the bench itself
runs in tests/e2e/test_bench_serve.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from treespec.bench.serve_bench import (
    GRPC,
    IN_PROCESS,
    LOCAL,
    PLAIN,
    Concurrent,
    ServeBenchArgs,
    StreamTiming,
    _payload,
    render,
    stack_config,
)
from treespec.shared.cli.main import build_parser, main
from treespec.shared.cli.serve import services
from treespec.shared.launcher.process import ServiceProcess


def _args(*argv: str) -> ServeBenchArgs:
    return ServeBenchArgs.from_namespace(build_parser().parse_args(["bench", "serve", *argv]))


def test_the_stacks_a_run_serves_through(bench_defaults: tuple[Path, Path]) -> None:
    assert _args("--speculative-algorithm", "NGRAM").stacks() == (LOCAL, PLAIN)
    both = _args("--speculative-algorithm", "NGRAM", "--drafter-links", "grpc, local,grpc", "--no-plain")
    assert both.stacks() == (GRPC, LOCAL)  # in the order given, once each
    assert _args("--speculative-algorithm", "NONE", "--drafter-links", "local,grpc").stacks() == (PLAIN,)


@pytest.mark.parametrize("links", ["", "tcp", "local,unix"])
def test_unknown_drafter_links_exit_2(
    bench_defaults: tuple[Path, Path], links: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "serve", "--drafter-links", links])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "treespec bench serve: error:" in err and "drafter links are local, grpc, in-process" in err


def test_each_stack_links_its_drafter_as_named(bench_defaults: tuple[Path, Path], tiny_path: Path) -> None:
    args = _args("--speculative-algorithm", "NGRAM", "--model", str(tiny_path))
    local, grpc, inside, plain = (services(stack_config(args, s)) for s in (LOCAL, GRPC, IN_PROCESS, PLAIN))

    def drafter_address(processes: list[ServiceProcess]) -> str:
        verifier = next(p.argv for p in processes if p.name == "verifier")
        return str(verifier[verifier.index("--drafter-address") + 1])

    assert drafter_address(local).startswith("local:")
    drafter = next(p.argv for p in grpc if p.name == "drafter")
    assert "--local-socket" not in drafter
    assert drafter_address(grpc) == f"127.0.0.1:{drafter[drafter.index('--port') + 1]}"
    assert [p.name for p in plain] == ["verifier", "gateway"]
    assert [p.name for p in inside] == ["verifier", "gateway"]  # the drafter runs in the verifier
    verifier = next(p.argv for p in inside if p.name == "verifier")
    assert verifier[verifier.index("--speculative-algorithm") + 1] == "NGRAM"
    assert "--drafter-address" not in verifier


def test_the_ratios_between_the_stacks(bench_defaults: tuple[Path, Path]) -> None:
    args = _args("--speculative-algorithm", "NGRAM", "--drafter-links", "local,grpc", "--concurrency", "4")
    timings = {
        LOCAL: [StreamTiming(100, 2.0, 0.1, 0.02), StreamTiming(50, 2.0, 0.3, None)],  # 37.5 tok/s
        GRPC: [StreamTiming(150, 5.0, 0.2, 0.03)],  # 30 tok/s
        PLAIN: [StreamTiming(150, 6.0, 0.2, 0.04)],  # 25 tok/s
    }
    concurrent = {LOCAL: Concurrent(90.0, 0.25), GRPC: Concurrent(80.0, 0.3), PLAIN: Concurrent(100.0, 0.5)}
    payload = _payload(args, [], 50.0, timings, concurrent)
    assert payload["serve_tps"] == pytest.approx(37.5)  # the first stack is the one treespec serve runs
    assert payload["serve_vs_engine"] == pytest.approx(0.75)
    assert payload["serve_ttft_ms"] == pytest.approx(200.0)
    assert payload["serve_itl_ms"] == pytest.approx(20.0)  # of the streams with a gap to measure
    assert payload["concurrent4_tps"] == 90.0 and payload["concurrent8_tps"] is None
    assert payload["serve_vs_plain"] == pytest.approx(1.5)
    assert payload["concurrent_vs_plain"] == pytest.approx(0.9)
    assert payload["local_vs_grpc"] == pytest.approx(1.25)
    assert payload["local_vs_grpc_concurrent"] == pytest.approx(90 / 80)
    assert payload["setup"]["stacks"] == [LOCAL, GRPC, PLAIN]
    table = render(payload)
    assert "HTTP: NGRAM, drafter over gRPC" in table and "HTTP: plain decoding" in table
    assert "NGRAM / plain: 1.50x at batch 1, 0.90x at 4 concurrent" in table
    assert "local socket / over gRPC: 1.25x at batch 1, 1.12x at 4 concurrent" in table
    assert payload["gateway_cpu_ms_per_token"] == {LOCAL: 0.25, GRPC: 0.3, PLAIN: 0.5}
    assert (
        "gateway CPU per streamed token at 4 concurrent: local 0.250 ms, grpc 0.300 ms, plain 0.500 ms"
        in table
    )
    assert "in_process_vs_local" not in payload


def test_the_in_process_stack_against_the_local_socket(bench_defaults: tuple[Path, Path]) -> None:
    args = _args("--speculative-algorithm", "NGRAM", "--drafter-links", "local,in-process")
    assert args.stacks() == (LOCAL, IN_PROCESS, PLAIN)
    timings = {
        LOCAL: [StreamTiming(100, 4.0, 0.1, 0.02)],  # 25 tok/s
        IN_PROCESS: [StreamTiming(150, 5.0, 0.1, 0.02)],  # 30 tok/s
        PLAIN: [StreamTiming(100, 5.0, 0.1, 0.02)],
    }
    concurrent = {
        LOCAL: Concurrent(80.0, None),
        IN_PROCESS: Concurrent(100.0, None),
        PLAIN: Concurrent(90.0, None),
    }
    payload = _payload(args, [], 40.0, timings, concurrent)
    assert payload["in_process_vs_local"] == pytest.approx(1.2)
    assert payload["in_process_vs_local_concurrent"] == pytest.approx(1.25)
    table = render(payload)
    assert "HTTP: NGRAM, drafter in the verifier's process" in table
    assert "drafter in process / over a local socket: 1.20x at batch 1, 1.25x at 8 concurrent" in table

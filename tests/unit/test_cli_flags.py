"""Every command refuses out-of-range numbers and drafter settings up front: exit 2 with a message that
names what is wrong, before a model is loaded or a process started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from treespec.shared.cli.engine_flags import EngineFlags
from treespec.shared.cli.main import main


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own errors
        return int(exc.code or 0)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["bench", "ngram", "--per-category", "0"], "--per-category"),
        (["bench", "ngram", "--max-new-tokens", "0"], "--max-new-tokens"),
        (["bench", "eagle", "--threads", "0"], "--threads"),
        (["bench", "eagle", "--draft-deadline", "0"], "--draft-deadline"),
        (["bench", "eagle", "--speculative-num-draft-tokens", "0"], "--speculative-num-draft-tokens"),
        (["bench", "serve", "--concurrency", "0"], "--concurrency"),
        (["verifier", "--page-size", "0"], "--page-size"),
        (["serve", "--max-model-len", "0"], "--context-length/--max-model-len"),
        (["serve", "--max-num-seqs", "-1"], "--max-running-requests/--max-num-seqs"),
        (["verifier", "--max-total-tokens", "-8"], "--max-total-tokens"),
        (["verifier", "--port", "70000"], "--port"),
        (["verifier", "--metrics-port", "-1"], "--metrics-port"),
        (["verifier", "--draft-deadline-ms", "0"], "--draft-deadline-ms"),
        (["verifier", "--speculative-num-draft-tokens", "zero"], "--speculative-num-draft-tokens"),
        (["verifier", "--speculative-node-cost", "-0.1"], "--speculative-node-cost"),
        (["verifier", "--speculative-node-cost", "nan"], "--speculative-node-cost"),
        (["bench", "ngram", "--speculative-node-cost", "inf"], "--speculative-node-cost"),
        (["bench", "eagle", "--speculative-node-cost", "-1"], "--speculative-node-cost"),
        (["gateway", "--port", "-1", "--verifier-address", "127.0.0.1:1"], "--port"),
        (["gateway", "--max-body-bytes", "0", "--verifier-address", "127.0.0.1:1"], "--max-body-bytes"),
        (["gateway", "--responses-store-size", "-1", "--verifier-address", "h:1"], "--responses-store-size"),
        (["serve", "--responses-store-size", "many"], "--responses-store-size"),
        (["serve", "--draft-deadline-ms", "-5"], "--draft-deadline-ms"),
        (["serve", "--verifier-port", "65536"], "--verifier-port"),
        (["serve", "--speculative-num-steps", "0"], "--speculative-num-steps"),
        (["serve", "--speculative-node-cost", "x"], "--speculative-node-cost"),
        (["run-batch", "-i", "in", "-o", "out", "--max-concurrency", "0"], "--max-concurrency"),
        (["verifier", "--speculative-tree-cost", "-0.5"], "--speculative-tree-cost"),
        (["bench", "ngram", "--speculative-tree-cost", "nan"], "--speculative-tree-cost"),
        (["drafter", "--kind", "ngram", "--vocab-size", "0"], "--vocab-size"),
        (["drafter", "--kind", "ngram", "--vocab-size", "97", "--port", "99999"], "--port"),
    ],
)
def test_out_of_range_numbers_exit_2_naming_the_flag(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_code(argv) == 2
    assert f"argument {named}:" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "verifier"])
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["NGRAM", "--speculative-ngram-capacity", "0"], "capacity"),
        (["NGRAM", "--speculative-ngram-max-bfs-breadth", "0"], "max_bfs_breadth"),
        (["NGRAM", "--speculative-ngram-min-path-prob", "1.5"], "min_path_prob"),
        (["EAGLE3", "--speculative-eagle-min-path-prob", "2"], "min_path_prob"),
        (["EAGLE", "--speculative-eagle-level-cost", "1"], "level_cost"),
        (["STANDALONE"], "--speculative-draft-model-path"),
        (["STANDALONE", "--speculative-draft-model-path", "/nowhere"], "no draft model in /nowhere"),
        (["FOO"], "unknown drafter 'FOO'; known: eagle, eagle3, ngram"),
        (["EAGLE3", "--speculative-draft-model-path", "/nowhere"], "/nowhere: no config.json"),
        (["nowhere.module:Drafter"], "cannot load drafter"),
    ],
)
def test_bad_drafter_settings_exit_2_before_anything_starts(
    command: str, settings: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    algorithm, *flags = settings
    assert _exit_code([command, "--speculative-algorithm", algorithm, *flags]) == 2
    err = capsys.readouterr().err
    assert f"treespec {command}: error:" in err and message in err


def test_the_node_cost_flag_reaches_the_engine_through_serve_and_verifier(tmp_path: Path) -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services
    from treespec.shared.cli.verifier import config_from_args

    given = ServeConfig.on_free_ports(tmp_path, "NGRAM", node_cost=0.03)
    verifier = next(p for p in services(given) if p.name == "verifier").argv
    assert verifier[verifier.index("--speculative-node-cost") + 1] == "0.03"
    measured = next(p for p in services(ServeConfig.on_free_ports(tmp_path, "NGRAM")) if p.name == "verifier")
    assert "--speculative-node-cost" not in measured.argv  # the verifier measures it

    def engine_node_cost(*flags: str) -> float | None:
        ns = build_parser().parse_args(["verifier", "--model-path", str(tmp_path), *flags])
        return config_from_args(ns).engine.node_cost

    assert engine_node_cost("--speculative-node-cost", "0.03") == 0.03
    assert engine_node_cost() is None


def test_the_tree_cost_flag_goes_with_a_node_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services
    from treespec.shared.cli.verifier import config_from_args

    given = ServeConfig.on_free_ports(tmp_path, "NGRAM", node_cost=0.03, tree_cost=0.1)
    verifier = next(p for p in services(given) if p.name == "verifier").argv
    assert verifier[verifier.index("--speculative-tree-cost") + 1] == "0.1"

    def engine_costs(*flags: str) -> tuple[float | None, float]:
        ns = build_parser().parse_args(["verifier", "--model-path", str(tmp_path), *flags])
        engine = config_from_args(ns).engine
        return engine.node_cost, engine.tree_cost

    assert engine_costs("--speculative-node-cost", "0.03", "--speculative-tree-cost", "0.1") == (0.03, 0.1)
    assert engine_costs("--speculative-node-cost", "0.03") == (0.03, 0.0)
    for command in (["serve"], ["verifier"], ["bench", "ngram"], ["bench", "eagle"]):
        assert _exit_code([*command, "--speculative-tree-cost", "0.1"]) == 2
        assert "--speculative-tree-cost needs --speculative-node-cost" in capsys.readouterr().err


def test_prefix_caching_is_on_unless_disabled_through_serve_and_verifier(tmp_path: Path) -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services
    from treespec.shared.cli.verifier import config_from_args

    def engine_caches(*flags: str) -> bool:
        ns = build_parser().parse_args(["verifier", "--model-path", str(tmp_path), *flags])
        return config_from_args(ns).engine.prefix_caching

    assert engine_caches()
    assert not engine_caches("--disable-prefix-caching")
    assert not engine_caches("--disable-radix-cache")  # SGLang's name
    ns = build_parser().parse_args(["serve", "--model-path", str(tmp_path), "--disable-prefix-caching"])
    assert ns.disable_prefix_caching
    on = next(p for p in services(ServeConfig.on_free_ports(tmp_path, "NGRAM")) if p.name == "verifier")
    assert "--disable-prefix-caching" not in on.argv
    verifier = next(
        p
        for p in services(
            ServeConfig.on_free_ports(tmp_path, "NGRAM", engine=EngineFlags(prefix_caching=False))
        )
        if p.name == "verifier"
    )
    assert "--disable-prefix-caching" in verifier.argv


def test_exact_weight_forms_are_on_unless_disabled_through_serve_and_verifier(tmp_path: Path) -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services
    from treespec.shared.cli.verifier import config_from_args

    def exact(*flags: str) -> bool:
        ns = build_parser().parse_args(["verifier", "--model-path", str(tmp_path), *flags])
        return config_from_args(ns).engine.exact_weight_forms

    assert exact() and not exact("--disable-exact-weight-forms")
    ns = build_parser().parse_args(["serve", "--model-path", str(tmp_path), "--disable-exact-weight-forms"])
    assert EngineFlags.of(ns) == EngineFlags(exact_weight_forms=False)
    off = ServeConfig.on_free_ports(tmp_path, "NGRAM", engine=EngineFlags(exact_weight_forms=False))
    verifier = next(p for p in services(off) if p.name == "verifier")
    assert "--disable-exact-weight-forms" in verifier.argv
    on = next(p for p in services(ServeConfig.on_free_ports(tmp_path, "NGRAM")) if p.name == "verifier")
    assert "--disable-exact-weight-forms" not in on.argv


def test_the_tool_call_parser_reaches_the_gateway_through_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from treespec.shared.cli.gateway import tool_call_parser
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services

    def parser(*flags: str) -> str | None:
        return tool_call_parser(build_parser().parse_args(["gateway", "--verifier-address", "h:1", *flags]))

    assert parser() is None
    assert parser("--tool-call-parser", "hermes") == "hermes"  # SGLang's: the parser alone enables "auto"
    assert parser("--enable-auto-tool-choice", "--tool-call-parser", "llama3_json") == "llama3_json"  # vLLM's
    assert _exit_code(["serve", "--enable-auto-tool-choice"]) == 2
    assert "--enable-auto-tool-choice needs --tool-call-parser" in capsys.readouterr().err
    assert _exit_code(["gateway", "--verifier-address", "h:1", "--tool-call-parser", "nope"]) == 2
    assert "--tool-call-parser" in capsys.readouterr().err

    def gateway_argv(**overrides: str | None) -> list[str]:
        config = ServeConfig.on_free_ports(tmp_path, "NGRAM", **overrides)
        return list(next(p for p in services(config) if p.name == "gateway").argv)

    assert "--tool-call-parser" not in gateway_argv()
    argv = gateway_argv(tool_call_parser="hermes")
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"


def test_the_reasoning_parser_reaches_the_gateway_through_serve(tmp_path: Path) -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services

    ns = build_parser().parse_args(["serve", "--reasoning-parser", "deepseek_r1"])
    assert ns.reasoning_parser == "deepseek_r1"
    assert _exit_code(["gateway", "--verifier-address", "h:1", "--reasoning-parser", "o1"]) == 2
    config = ServeConfig.on_free_ports(tmp_path, "NGRAM", reasoning_parser="qwen3")
    argv = list(next(p for p in services(config) if p.name == "gateway").argv)
    assert argv[argv.index("--reasoning-parser") + 1] == "qwen3"


def test_the_responses_store_size_reaches_the_gateway_through_serve(tmp_path: Path) -> None:
    from treespec.gateway.config import DEFAULT_RESPONSES_STORE_SIZE
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services

    assert build_parser().parse_args(["serve", "--responses-store-size", "0"]).responses_store_size == 0
    for size in (None, 7):
        overrides = {} if size is None else {"responses_store_size": size}
        config = ServeConfig.on_free_ports(tmp_path, "NGRAM", **overrides)
        argv = list(next(p for p in services(config) if p.name == "gateway").argv)
        assert argv[argv.index("--responses-store-size") + 1] == str(size or DEFAULT_RESPONSES_STORE_SIZE)
        assert "--responses-store-url" not in argv
    url = "redis://127.0.0.1:6399/2"
    ns = build_parser().parse_args(["serve", "--responses-store-url", url, "--responses-store-ttl", "60"])
    config = ServeConfig.on_free_ports(
        tmp_path,
        "NGRAM",
        responses_store_url=ns.responses_store_url,
        responses_store_ttl_s=ns.responses_store_ttl,
    )
    argv = list(next(p for p in services(config) if p.name == "gateway").argv)
    gateway = build_parser().parse_args(argv)
    assert (gateway.responses_store_url, gateway.responses_store_ttl) == (url, 60)
    assert _exit_code(["serve", "--responses-store-ttl", "0"]) == 2


def test_the_scheduling_policy_reaches_the_engine_through_serve_and_verifier(tmp_path: Path) -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services
    from treespec.shared.cli.verifier import config_from_args

    assert _exit_code(["verifier", "--scheduling-policy", "lifo"]) == 2
    for policy in (None, "priority"):
        config = ServeConfig.on_free_ports(tmp_path, "NGRAM", engine=EngineFlags(scheduling_policy=policy))
        argv = list(next(p for p in services(config) if p.name == "verifier").argv)
        assert ("--scheduling-policy" in argv) == (policy is not None)
        ns = build_parser().parse_args(argv)
        assert config_from_args(ns).engine.scheduling_policy == (policy or "fcfs")


def test_prediction_draft_tokens_reach_the_engine_through_serve_and_verifier(tmp_path: Path) -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services
    from treespec.shared.cli.verifier import config_from_args

    assert _exit_code(["verifier", "--prediction-draft-tokens", "0"]) == 2
    for rows in (None, 1, 64):
        config = ServeConfig.on_free_ports(
            tmp_path, "NGRAM", engine=EngineFlags(prediction_draft_tokens=rows)
        )
        argv = list(next(p for p in services(config) if p.name == "verifier").argv)
        assert ("--prediction-draft-tokens" in argv) == (rows is not None)
        ns = build_parser().parse_args(argv)
        assert config_from_args(ns).engine.prediction_draft_tokens == (rows or 32)


def test_the_speculation_gate_flags_reach_the_engine_through_serve_and_verifier(tmp_path: Path) -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services
    from treespec.shared.cli.verifier import config_from_args

    assert _exit_code(["verifier", "--speculative-disable-by-batch-size", "0"]) == 2
    for adaptive, limit in ((True, None), (False, 4)):
        flags = EngineFlags(adaptive_speculation=adaptive, speculative_disable_by_batch_size=limit)
        config = ServeConfig.on_free_ports(tmp_path, "EAGLE3", engine=flags)
        argv = list(next(p for p in services(config) if p.name == "verifier").argv)
        assert ("--disable-adaptive-speculation" in argv) == (not adaptive)
        assert ("--speculative-disable-by-batch-size" in argv) == (limit is not None)
        engine = config_from_args(build_parser().parse_args(argv)).engine
        assert (engine.adaptive_speculation, engine.speculative_disable_by_batch_size) == (adaptive, limit)
    ns = build_parser().parse_args(["serve", "--disable-adaptive-speculation"])
    assert not EngineFlags.of(ns).adaptive_speculation


@pytest.mark.parametrize(
    "flags",
    [
        ["--context-length", "1024", "--max-running-requests", "4", "--chunked-prefill-size", "128"],
        ["--max-model-len", "1024", "--max-num-seqs", "4", "--max-num-batched-tokens", "128"],  # vLLM's
    ],
)
def test_serve_hands_the_engine_flags_on_to_its_verifier(tmp_path: Path, flags: list[str]) -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import ServeConfig, services
    from treespec.shared.cli.verifier import config_from_args

    more = ["--page-size", "8", "--max-total-tokens", "4096", "--dtype", "float32", "--device", "cpu"]
    ns = build_parser().parse_args(["serve", "--model-path", str(tmp_path), *flags, *more])
    config = ServeConfig.on_free_ports(tmp_path, "NGRAM", engine=EngineFlags.of(ns))
    argv = list(next(p for p in services(config) if p.name == "verifier").argv)
    engine = config_from_args(build_parser().parse_args(argv)).engine
    assert (engine.context_length, engine.max_running_requests, engine.chunked_prefill_size) == (1024, 4, 128)
    assert (engine.page_size, engine.max_total_tokens, engine.dtype, engine.device) == (
        8,
        4096,
        "float32",
        "cpu",
    )
    default = ServeConfig.on_free_ports(tmp_path, "NGRAM")
    plain = list(next(p for p in services(default) if p.name == "verifier").argv)
    assert not {"--context-length", "--device", "--dtype", "--page-size", "--profile-dir"} & set(plain)
    profiled = ServeConfig.on_free_ports(tmp_path, "NGRAM", profile_dir=tmp_path / "traces")
    argv = list(next(p for p in services(profiled) if p.name == "verifier").argv)
    assert config_from_args(build_parser().parse_args(argv)).profile_dir == tmp_path / "traces"


def test_serve_refuses_a_co_located_drafter_on_a_device_neither_cpu_nor_cuda(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Co-location shares CPU memory or, on a GPU, CUDA IPC handles: nothing else."""
    assert _exit_code(["serve", "--speculative-algorithm", "EAGLE3", "--device", "mps"]) == 2
    assert "CUDA IPC" in capsys.readouterr().err
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import serve_config

    inside = ["serve", "--speculative-algorithm", "EAGLE3", "--device", "mps", "--drafter-in-process"]
    assert serve_config(build_parser().parse_args(inside)).drafter_in_process  # nothing is shared


def test_the_chat_template_flags_reach_the_gateway_through_serve_and_a_bad_one_stops_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from treespec.shared.cli.serve import ServeConfig, services

    for argv in (["serve"], ["gateway", "--verifier-address", "127.0.0.1:1"]):
        assert _exit_code([*argv, "--chat-template", str(tmp_path / "missing.jinja")]) == 2
        assert "neither a file nor a Jinja template" in capsys.readouterr().err
        assert _exit_code([*argv, "--chat-template", "{% if %}"]) == 2
        assert "does not parse" in capsys.readouterr().err
    template = "{{ messages[0].content }}"
    config = ServeConfig.on_free_ports(
        tmp_path, "NGRAM", chat_template=template, trust_request_chat_template=True
    )
    argv = list(next(p for p in services(config) if p.name == "gateway").argv)
    assert argv[argv.index("--chat-template") + 1] == template and "--trust-request-chat-template" in argv
    plain = list(
        next(p for p in services(ServeConfig.on_free_ports(tmp_path, "NGRAM")) if p.name == "gateway").argv
    )
    assert "--chat-template" not in plain and "--trust-request-chat-template" not in plain


def test_allow_auto_truncate_reaches_the_gateway_through_serve() -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import serve_config, services

    def gateway_argv(*flags: str) -> list[str]:
        config = serve_config(build_parser().parse_args(["serve", *flags]))
        return list(next(p for p in services(config) if p.name == "gateway").argv)

    assert "--allow-auto-truncate" not in gateway_argv()
    argv = gateway_argv("--allow-auto-truncate")
    assert build_parser().parse_args(argv).allow_auto_truncate
    assert not build_parser().parse_args(["gateway", "--verifier-address", "h:1"]).allow_auto_truncate


def test_run_batch_refuses_bad_drafter_settings_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.jsonl"
    argv = ["run-batch", "-i", str(tmp_path / "in.jsonl"), "-o", str(out)]
    assert _exit_code([*argv, "--speculative-ngram-capacity", "0"]) == 2
    assert "treespec run-batch: error:" in capsys.readouterr().err and not out.exists()


def test_the_command_line_loads_without_torch() -> None:
    """Parsing flags, `--help` and the gateway import no torch: each command imports it when it runs."""
    code = "import sys, treespec.shared.cli.main; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize("algorithm", ["NGRAM", "EAGLE3"])
def test_serve_runs_the_drafter_in_the_verifier_when_asked(tmp_path: Path, algorithm: str) -> None:
    """`--drafter-in-process`: no drafter process nor sockets; the verifier builds the drafter with the
    same budget, costs and plugin options (also given as `--option`, as `treespec drafter` takes them)."""
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.serve import serve_config, services
    from treespec.shared.cli.verifier import config_from_args

    flags = ["--speculative-num-steps", "3", "--speculative-node-cost", "0.04"]
    option = (
        ["--speculative-ngram-max-bfs-breadth", "3"]
        if algorithm == "NGRAM"
        else ["--speculative-eagle-level-cost", "0.1"]
    )
    argv = ["serve", "--model-path", str(tmp_path), "--speculative-algorithm", algorithm, *flags, *option]
    config = serve_config(build_parser().parse_args([*argv, "--drafter-in-process"]))
    assert config.colocation_socket is None and config.draft_socket is None
    processes = services(config)
    assert [p.name for p in processes] == ["verifier", "gateway"]
    verifier = config_from_args(build_parser().parse_args(processes[0].argv))
    assert verifier.drafter.algorithm == algorithm and not verifier.drafter.remote_targets
    assert verifier.drafter.colocation_socket is None
    assert verifier.drafter.options == (
        {"max_bfs_breadth": 3} if algorithm == "NGRAM" else {"level_cost": 0.1}
    )
    assert verifier.engine.speculation.num_steps == 3 and verifier.engine.node_cost == 0.04
    apart = services(serve_config(build_parser().parse_args(argv)))  # the default: a drafter process
    assert (
        [p.name for p in apart] == ["verifier", "drafter", "gateway"]
        if algorithm == "EAGLE3"
        else [
            "drafter",
            "verifier",
            "gateway",
        ]
    )


def test_the_verifier_takes_plugin_options_as_the_drafter_does(tmp_path: Path) -> None:
    from treespec.shared.cli.main import build_parser
    from treespec.shared.cli.verifier import config_from_args

    argv = ["verifier", "--model-path", str(tmp_path), "--speculative-algorithm", "NGRAM"]
    flags = ["--speculative-ngram-max-bfs-breadth", "3", "--option", "min_bfs_breadth=2"]
    config = config_from_args(build_parser().parse_args([*argv, *flags]))
    assert config.drafter.options == {"max_bfs_breadth": 3, "min_bfs_breadth": 2}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        config_from_args(build_parser().parse_args([*argv, "--option", "novalue"]))

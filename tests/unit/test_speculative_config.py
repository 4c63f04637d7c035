"""vLLM's --speculative-config on serve and verifier (shared/cli/speculative_config.py): the JSON becomes
the flags it means, reaches the engine as those flags would, and is refused where it cannot be honoured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from treespec.shared.cli.main import build_parser, main
from treespec.shared.cli.speculative_config import SpeculativeConfigError, expand, translate


def _expand(command: str, config: object, *flags: str) -> list[str]:
    warnings: list[str] = []
    out = expand([command, *flags, "--speculative-config", json.dumps(config)], warnings.append)
    assert not warnings
    return out


@pytest.mark.parametrize(
    ("config", "flags"),
    [
        (
            {"method": "eagle3", "model": "/heads/h", "num_speculative_tokens": 3},
            [
                "--speculative-algorithm", "EAGLE3",
                "--speculative-draft-model-path", "/heads/h",
                "--speculative-num-steps", "3",
            ],
        ),
        ({"method": "EAGLE"}, ["--speculative-algorithm", "EAGLE"]),
        # A depth the default 8 nodes cannot reach as a chain raises the node budget to it.
        (
            {"method": "eagle3", "num_speculative_tokens": 9},
            [
                "--speculative-algorithm", "EAGLE3",
                "--speculative-num-steps", "9",
                "--speculative-num-draft-tokens", "10",
            ],
        ),
        (
            {"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2, "num_speculative_tokens": 3},
            [
                "--speculative-algorithm", "NGRAM",
                "--speculative-ngram-max-match-window-size", "4",
                "--speculative-ngram-min-match-window-size", "2",
                "--speculative-num-steps", "3",
            ],
        ),
        # NGRAM's node budget is its longest window (4 here): 5 tokens need 6 nodes.
        (
            {"model": "[ngram]", "prompt_lookup_max": 4, "num_speculative_tokens": 5},
            [
                "--speculative-algorithm", "NGRAM",
                "--speculative-ngram-max-match-window-size", "4",
                "--speculative-num-steps", "5",
                "--speculative-num-draft-tokens", "6",
            ],
        ),
    ],
)  # fmt: skip
def test_the_json_becomes_the_flags_it_means(config: dict[str, object], flags: list[str]) -> None:
    assert translate(config).flags == flags
    assert _expand("serve", config, "--port", "9000") == ["serve", "--port", "9000", *flags]


def test_a_node_budget_given_as_a_flag_is_kept() -> None:
    config = {"method": "eagle3", "num_speculative_tokens": 9}
    out = _expand("verifier", config, "--speculative-num-draft-tokens", "6")
    assert out.count("--speculative-num-draft-tokens") == 1
    assert out[out.index("--speculative-num-draft-tokens") + 1] == "6"


def test_a_window_given_as_a_flag_sets_the_ngram_node_budget() -> None:
    config = {"method": "ngram", "num_speculative_tokens": 5}
    out = _expand("serve", config, "--speculative-ngram-max-match-window-size", "4")
    assert out[-2:] == ["--speculative-num-draft-tokens", "6"]
    out = _expand("serve", config, "--speculative-ngram-max-match-window-size=8")
    assert "--speculative-num-draft-tokens" not in out


def test_the_method_of_a_head_folder_is_read_from_its_config(tmp_path: Path) -> None:
    for architecture, algorithm in (("LlamaForCausalLMEagle3", "EAGLE3"), ("LlamaForCausalLMEagle", "EAGLE")):
        head = tmp_path / architecture
        head.mkdir()
        (head / "config.json").write_text(json.dumps({"architectures": [architecture]}))
        assert translate({"model": str(head)}).flags[:2] == ["--speculative-algorithm", algorithm]
    # Without a readable config, vLLM's rule: the folder's name.
    assert translate({"model": "/nowhere/sglang-EAGLE3-llama"}).flags[1] == "EAGLE3"
    # A causal LM's folder: vLLM's draft_model, treespec's STANDALONE.
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    assert translate({"model": str(draft)}).flags == [
        "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", str(draft),
    ]  # fmt: skip
    with pytest.raises(SpeculativeConfigError, match="neither an EAGLE head nor a causal LM"):
        translate({"model": str(tmp_path)})


def test_a_draft_model_becomes_standalone_with_its_depth() -> None:
    config = {"method": "draft_model", "model": "/m", "num_speculative_tokens": 3}
    flags = translate(config).flags
    assert flags[:4] == ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/m"]
    assert flags[flags.index("--speculative-num-steps") + 1] == "3"


def test_keys_of_vllms_own_machinery_are_ignored_with_a_warning() -> None:
    warnings: list[str] = []
    config = {"method": "ngram", "draft_tensor_parallel_size": 1, "enforce_eager": True}
    out = expand(["serve", "--speculative-config", json.dumps(config)], warnings.append)
    assert out == ["serve", "--speculative-algorithm", "NGRAM"]
    assert len(warnings) == 1
    assert "draft_tensor_parallel_size" in warnings[0] and "enforce_eager" in warnings[0]


def test_disable_by_batch_size_becomes_its_flag() -> None:
    flags = translate({"method": "eagle3", "disable_by_batch_size": 4}).flags
    assert flags[flags.index("--speculative-disable-by-batch-size") + 1] == "4"
    with pytest.raises(SpeculativeConfigError, match="disable_by_batch_size must be a positive integer"):
        translate({"method": "ngram", "disable_by_batch_size": 0})
    with pytest.raises(SpeculativeConfigError, match="both set the same thing"):
        config = {"method": "ngram", "disable_by_batch_size": 4}
        _expand("serve", config, "--speculative-disable-by-batch-size", "8")


def test_other_commands_and_command_lines_without_it_are_left_alone() -> None:
    argv = ["bench", "ngram", "--speculative-config", "{}"]
    assert expand(argv, print) == argv  # bench's own parser refuses it
    argv = ["serve", "--speculative-algorithm", "EAGLE3"]
    assert expand(argv, print) == argv
    assert _expand("serve", {"method": "ngram"})[:1] == ["serve"]
    one_arg = expand(["verifier", '--speculative_config={"method": "eagle"}'], print)
    assert one_arg == ["verifier", "--speculative-algorithm", "EAGLE"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--speculative-config", "{not json"], "not valid JSON"),
        (["--speculative-config", "[1]"], "expected a JSON object"),
        (["--speculative-config"], "needs a JSON object"),
        (["--speculative-config", '{"method": "medusa"}'], "'medusa' is not supported"),
        (["--speculative-config", '{"method": "mtp", "model": "/m"}'], "'mtp' is not supported"),
        (["--speculative-config", '{"method": "draft_model"}'], "draft_model needs a model"),
        (["--speculative-config", "{}"], "give a method"),
        (["--speculative-config", '{"method": "ngram", "colour": 1}'], "unknown keys colour"),
        (
            [
                "--speculative-config",
                '{"method": "eagle", "acceptance_method": "typical_acceptance_sampler"}',
            ],
            "changes the output",
        ),
        (["--speculative-config", '{"method": "eagle", "speculative_token_tree": "[(0,)]"}'], "not taken"),
        (["--speculative-config", '{"method": "ngram", "model": "/m"}'], "takes no model"),
        (["--speculative-config", '{"method": "eagle3", "prompt_lookup_max": 3}'], "ngram only"),
        (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 0}'], "positive integer"),
        (["--speculative-config", '{"method": "ngram", "prompt_lookup_max": "4"}'], "positive integer"),
        (
            ["--speculative-algorithm", "NGRAM", "--speculative-config", '{"method": "eagle3"}'],
            "--speculative-algorithm both set",
        ),
        (
            ["--speculative-config", '{"method": "ngram"}', "--speculative_config", '{"method": "ngram"}'],
            "given 2 times",
        ),
    ],
)
@pytest.mark.parametrize("command", ["serve", "verifier"])
def test_a_config_that_cannot_be_honoured_exits_2_before_anything_starts(
    command: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, *argv]) == 2
    err = capsys.readouterr().err
    assert "treespec: error: --speculative-config" in err and message in err


def test_the_settings_reach_the_verifiers_engine_and_drafter(tmp_path: Path) -> None:
    from treespec.shared.cli.verifier import config_from_args

    config = {"method": "ngram", "prompt_lookup_max": 6, "num_speculative_tokens": 4}
    argv = expand(
        ["verifier", "--model-path", str(tmp_path), "--speculative-config", json.dumps(config)], print
    )
    server = config_from_args(build_parser().parse_args(argv))
    assert server.drafter.algorithm == "NGRAM"
    assert server.drafter.options == {"max_match_window_size": 6}
    speculation = server.engine.speculation
    assert (speculation.num_steps, speculation.num_draft_tokens) == (4, 6)


def test_serve_takes_the_head_and_depth(tmp_path: Path) -> None:
    config = {"method": "eagle3", "model": str(tmp_path), "num_speculative_tokens": 4}
    ns = build_parser().parse_args(expand(["serve", "--speculative-config", json.dumps(config)], print))
    assert (ns.speculative_algorithm, ns.eagle_draft_path, ns.speculative_num_steps) == (
        "EAGLE3",
        str(tmp_path),
        4,
    )

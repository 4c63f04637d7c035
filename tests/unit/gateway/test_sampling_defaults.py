"""The model's default sampling parameters (generation_config.json, vLLM's --generation-config and
--override-generation-config, SGLang's --sampling-defaults): read, checked, applied to what a request
leaves out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from treespec.gateway.completion_request import CompletionRequest
from treespec.gateway.sampling_defaults import SamplingDefaults, load_sampling_defaults
from treespec.gateway.schemas import ChatCompletionRequest
from treespec.shared.cli.gateway import sampling_defaults
from treespec.shared.cli.main import build_parser

QWEN = {  # Qwen2.5-Instruct's generation_config.json
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "repetition_penalty": 1.05,
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
    "transformers_version": "4.37.0",
}


def _folder(tmp_path: Path, config: object) -> Path:
    (tmp_path / "generation_config.json").write_text(json.dumps(config))
    return tmp_path


def test_a_model_folder_s_generation_config_gives_the_defaults(tmp_path: Path) -> None:
    """The keys vLLM and SGLang read, others (do_sample, token ids) ignored; max_new_tokens is the
    default token limit."""
    defaults = load_sampling_defaults("auto", _folder(tmp_path, {**QWEN, "max_new_tokens": 512}))
    assert defaults == SamplingDefaults(
        temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05, max_tokens=512
    )
    assert defaults.as_request_fields()["max_tokens"] == 512
    assert defaults.as_generation_config()["max_new_tokens"] == 512


def test_no_file_or_openai_s_defaults_give_none(tmp_path: Path) -> None:
    assert load_sampling_defaults("auto", tmp_path) == SamplingDefaults()  # no generation_config.json
    folder = _folder(tmp_path, QWEN)
    for source in ("vllm", "openai", "none"):
        assert load_sampling_defaults(source, folder) == SamplingDefaults()
    assert SamplingDefaults().as_request_fields() == {}


def test_another_folder_and_overrides(tmp_path: Path) -> None:
    """--generation-config FOLDER reads that folder; --override-generation-config goes on top, in
    either mode, and a null there unsets a default."""
    (tmp_path / "other").mkdir()
    other = _folder(tmp_path / "other", QWEN)
    defaults = load_sampling_defaults(str(other), tmp_path / "model", {"temperature": 0, "top_k": None})
    assert defaults == SamplingDefaults(temperature=0.0, top_p=0.8, repetition_penalty=1.05)
    assert load_sampling_defaults("vllm", other, {"min_p": 0.1}) == SamplingDefaults(min_p=0.1)


@pytest.mark.parametrize(
    ("source", "overrides", "message"),
    [
        ("missing-folder", None, "--generation-config: no generation_config.json in missing-folder"),
        ("auto", '{"temperature": 9}', "--override-generation-config: temperature: Input should be less"),
        ("auto", '{"do_sample": true}', "unknown key 'do_sample'"),
        ("auto", "[1]", "--override-generation-config: expected a JSON object, got list"),
        ("auto", "{", "--override-generation-config: not valid JSON"),
    ],
)
def test_what_cannot_be_read_is_named(
    tmp_path: Path, source: str, overrides: str | None, message: str
) -> None:
    """As the gateway's flags give them."""
    argv = ["gateway", "--verifier-address", "127.0.0.1:1", "--generation-config", source]
    ns = build_parser().parse_args(
        [*argv, *(["--override-generation-config", overrides] if overrides else [])]
    )
    with pytest.raises(ValueError, match=message):
        sampling_defaults(ns, tmp_path)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"top_k": 1.5}, "top_k: Input should be a valid integer"),
        ({"top_p": 0}, "top_p: Input should be greater than 0"),
        ({"max_new_tokens": 0}, "max_new_tokens: Input should be greater than or equal to 1"),
        ({"temperature": "hot"}, "temperature: Input should be a valid number"),
    ],
)
def test_a_file_s_value_out_of_a_request_s_bounds_is_refused(
    tmp_path: Path, config: dict[str, object], message: str
) -> None:
    folder = _folder(tmp_path, config)
    with pytest.raises(ValueError, match=f"generation_config.json: {message}"):
        load_sampling_defaults("auto", folder)
    (tmp_path / "generation_config.json").write_text("[]")
    with pytest.raises(ValueError, match="not a JSON object"):
        load_sampling_defaults("auto", folder)


def test_a_request_s_own_fields_win() -> None:
    defaults = SamplingDefaults(temperature=0.7, top_p=0.8, top_k=20, max_tokens=64)
    body = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0, "top_k": -1}
    )
    applied = defaults.apply(body)
    assert (applied.temperature, applied.top_p, applied.top_k) == (0.0, 0.8, -1)
    assert applied.max_tokens is None  # the limit goes through token_limit, the client's field untouched
    assert body.top_p is None  # the request itself is not changed
    assert SamplingDefaults().apply(body) is body


def test_the_default_token_limit() -> None:
    """Where the client sets none: the least of the endpoint's default and the model's (as vLLM
    takes it); where it sets one, its own."""
    defaults = SamplingDefaults(max_tokens=64)
    chat = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert defaults.token_limit(chat, chat.token_limit) == 64
    completion = CompletionRequest.model_validate({"model": "m", "prompt": "hi"})  # endpoint default: 16
    assert defaults.token_limit(completion, completion.token_limit) == 16
    assert SamplingDefaults(max_tokens=8).token_limit(completion, completion.token_limit) == 8
    given = CompletionRequest.model_validate({"model": "m", "prompt": "hi", "max_tokens": 200})
    assert defaults.token_limit(given, given.token_limit) == 200
    assert SamplingDefaults().token_limit(chat, None) is None


def test_serve_hands_the_flags_to_its_gateway(tmp_path: Path) -> None:
    """SGLang's --sampling-defaults means vLLM's --generation-config; flags that disagree or a file that
    cannot be read stop serve before anything starts."""
    from treespec.shared.cli.serve import ServeFlagsError, serve_config, services

    def gateway_argv(*flags: str) -> list[str]:
        config = serve_config(build_parser().parse_args(["serve", *flags]))
        return list(services(config)[-1].argv)

    argv = gateway_argv("--sampling-defaults", "openai", "--override-generation-config", '{"top_k": 5}')
    assert argv[argv.index("--generation-config") + 1] == "vllm"
    assert argv[argv.index("--override-generation-config") + 1] == '{"top_k": 5}'
    argv = gateway_argv()
    assert argv[argv.index("--generation-config") + 1] == "auto"
    with pytest.raises(ServeFlagsError, match="disagree"):
        gateway_argv("--sampling-defaults", "model", "--generation-config", "vllm")
    with pytest.raises(ServeFlagsError, match="unknown key"):
        gateway_argv("--override-generation-config", '{"beams": 4}')
    with pytest.raises(ServeFlagsError, match=r"no generation_config\.json"):
        gateway_argv("--generation-config", str(tmp_path))


def test_a_response_reports_what_it_samples_with() -> None:
    """Its own temperature and top_p, else the model's defaults, else OpenAI's 1 and 1."""
    assert SamplingDefaults().reported(None, None) == (1.0, 1.0)
    assert SamplingDefaults(temperature=0.7, top_p=0.8).reported(None, None) == (0.7, 0.8)
    assert SamplingDefaults(temperature=0.7).reported(0.0, 0.5) == (0.0, 0.5)

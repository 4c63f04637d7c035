"""SGLang's /generate request without a server (native/request.py): its prompts, ids and sampling
parameters become the completion it runs as; errors name SGLang's fields."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from treespec.gateway.errors import APIError
from treespec.gateway.native.request import DEFAULT_MAX_NEW_TOKENS, NativeGenerateRequest


def _request(**fields: Any) -> NativeGenerateRequest:
    return NativeGenerateRequest.model_validate(fields)


def test_sglang_names_become_their_completion_fields() -> None:
    completion = _request(
        text="hi",
        sampling_params={
            "max_new_tokens": 9, "min_new_tokens": 2, "no_stop_trim": True, "regex": "[a-z]+",
            "sampling_seed": 5, "stop": ["x"], "top_k": 4, "n": 2, "ignore_eos": True,
        },
    ).groups("m")[0].completion  # fmt: skip
    assert (completion.token_limit, completion.min_tokens, completion.include_stop_str_in_output) == (
        9,
        2,
        True,
    )
    assert (completion.constraint, completion.seed, completion.stop) == (("regex", "[a-z]+"), 5, ["x"])
    assert (completion.top_k, completion.n, completion.ignore_eos) == (4, 2, True)
    default = _request(text="hi").groups("m")[0].completion
    assert default.token_limit == DEFAULT_MAX_NEW_TOKENS and default.logprob_count is None
    assert _request(text="hi", sampling_params={"json_schema": '{"type": "object"}'}).groups("m")[
        0
    ].completion.constraint == (
        "json_schema",
        '{"type": "object"}',
    )  # JSON text, as vLLM's guided_json takes it


def test_logprobs_of_the_output_and_from_a_prompt_position() -> None:
    output_only = _request(text="hi", return_logprob=True, top_logprobs_num=3).groups("m")[0].completion
    assert (output_only.logprob_count, output_only.prompt_logprob_count) == (3, None)
    both = _request(text="hi", return_logprob=True, logprob_start_len=0).groups("m")[0].completion
    assert (both.logprob_count, both.prompt_logprob_count) == (0, 0)
    assert _request(text="hi", logprob_start_len=0).groups("m")[0].completion.prompt_logprob_count is None


def test_prompts_and_their_ids() -> None:
    one = _request(input_ids=[1, 2, 3])
    assert (one.prompts, one.batch, one.rids("r")) == ([[1, 2, 3]], False, ["r"])
    batch = _request(input_ids=[[1], [2, 3]])
    assert (batch.prompts, batch.batch, batch.rids("r")) == ([[1], [2, 3]], True, ["r-0", "r-1"])
    texts = _request(text=["a", "b"], rid=["x", "y"])
    assert (texts.prompts, texts.rids("r")) == (["a", "b"], ["x", "y"])


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"max_new_tokens": 0}, "sampling_params.max_new_tokens"),
        ({"min_new_tokens": -1}, "sampling_params.min_new_tokens"),
        ({"top_p": 0}, "sampling_params.top_p"),
        ({"spaces_between_special_tokens": False}, "sampling_params.spaces_between_special_tokens"),
        ({"n": 129}, "sampling_params.n"),
    ],
)
def test_errors_name_the_sglang_field(params: dict[str, Any], param: str) -> None:
    with pytest.raises(APIError) as caught:
        _request(text="hi", sampling_params=params).groups("m")
    assert caught.value.status == 400 and caught.value.param == param


def test_one_dict_for_every_prompt_or_one_a_prompt() -> None:
    (shared,) = _request(text=["a", "b"], sampling_params={"max_new_tokens": 3}).groups("m")
    assert shared.prompts == (0, 1) and shared.completion.token_limit == 3
    first, second = _request(
        text=["a", "b"], sampling_params=[{"max_new_tokens": 3}, {"max_new_tokens": 5, "n": 2}]
    ).groups("m")
    assert (first.prompts, first.completion.token_limit) == ((0,), 3)
    assert (second.prompts, second.completion.token_limit, second.completion.n) == ((1,), 5, 2)
    with pytest.raises(APIError) as caught:
        _request(text=["a", "b"], sampling_params=[{}, {"temperature": -1}]).groups("m")
    assert caught.value.param == "sampling_params.1.temperature"
    with pytest.raises(ValidationError):
        _request(text=["a", "b"], sampling_params=[{}])

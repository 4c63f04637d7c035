"""From a request to GenerateRequests: seeds, limits, stop and end tokens, prompt checks."""

from __future__ import annotations

import json

import pytest

from treespec.gateway.completion_request import CompletionRequest
from treespec.gateway.errors import APIError
from treespec.gateway.native.request import NativeGenerateRequest
from treespec.gateway.run import _limit_param
from treespec.gateway.sampling import check_prompt, check_token_limit, choice_jobs, derive_seed, truncated
from treespec.gateway.schemas import ChatCompletionRequest
from treespec.gateway.verifier_client import ModelInfo, channel_target

INFO = ModelInfo("m", vocab_size=100, context_length=50, eos_token_ids=(2,), speculative_algorithm="")


def test_derived_seeds_are_distinct_and_stay_in_int64() -> None:
    assert derive_seed(7, 0) == 7
    assert len({derive_seed(7, i) for i in range(8)}) == 8
    assert derive_seed(2**63 - 1, 1) == -(2**63)


def test_choices_of_a_batch() -> None:
    body = CompletionRequest.model_validate(
        {
            "model": "m",
            "prompt": "x",
            "n": 2,
            "seed": 5,
            "temperature": 0.5,
            "stop_token_ids": [9],
            "top_k": 3,
        }
    )
    jobs = choice_jobs(body, [[1, 2], [3] * 45], 10, INFO, "cmpl-x")
    assert [job.index for job in jobs] == [0, 1, 2, 3]
    assert [job.request.request_id for job in jobs] == ["cmpl-x-0", "cmpl-x-1", "cmpl-x-2", "cmpl-x-3"]
    assert [job.request.sampling.seed for job in jobs] == [5, 6, 7, 8]
    assert [job.request.sampling.max_new_tokens for job in jobs] == [10, 10, 5, 5]  # the context's room
    assert jobs[0].end_token_ids == {2, 9}
    sampling = jobs[0].request.sampling
    assert sampling.temperature == 0.5 and sampling.top_k == 3 and list(sampling.stop_token_ids) == [9]
    assert not sampling.HasField("top_p")  # absent: the verifier's default
    assert not jobs[0].request.speculation.HasField("enabled")


def test_the_cache_salt_goes_with_every_choice_of_every_prompt() -> None:
    fields = {"model": "m", "prompt": ["x", "y"], "n": 2}
    salted = CompletionRequest.model_validate({**fields, "cache_salt": "tenant-a"})
    jobs = choice_jobs(salted, [[1], [2]], 4, INFO, "c")
    assert [job.request.cache_salt for job in jobs] == ["tenant-a"] * 4
    unsalted = CompletionRequest.model_validate({**fields, "cache_salt": None})
    assert all(job.request.cache_salt == "" for job in choice_jobs(unsalted, [[1], [2]], 4, INFO, "c"))


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({}, None),
        ({"logprobs": False}, None),
        ({"logprobs": True}, 0),
        ({"logprobs": True, "top_logprobs": 5}, 5),
    ],
)
def test_chat_logprobs_reach_the_verifier(fields: dict[str, object], want: int | None) -> None:
    messages = [{"role": "user", "content": "x"}]
    body = ChatCompletionRequest.model_validate({"model": "m", "messages": messages, **fields})
    (job,) = choice_jobs(body, [[1, 2]], 4, INFO, "chatcmpl-x")
    sampling = job.request.sampling
    assert (sampling.logprobs if sampling.HasField("logprobs") else None) == want


def test_penalties_reach_the_verifier() -> None:
    fields = {"presence_penalty": 0.5, "frequency_penalty": -1, "repetition_penalty": 1.2}
    bias = {"logit_bias": {"7": -100, "42": 2.5}}
    body = CompletionRequest.model_validate({"model": "m", "prompt": "x", **fields, **bias})
    (job,) = choice_jobs(body, [[1, 2]], 4, INFO, "cmpl-x")
    sampling = job.request.sampling
    assert dict(sampling.logit_bias) == {7: -100.0, 42: 2.5}
    with_min = CompletionRequest.model_validate({"model": "m", "prompt": "x", "min_tokens": 3})
    (job,) = choice_jobs(with_min, [[1, 2]], 4, INFO, "cmpl-x")
    assert job.request.sampling.min_tokens == 3 and job.min_tokens == 3
    assert sampling.presence_penalty == 0.5 and sampling.frequency_penalty == -1.0
    assert sampling.repetition_penalty == pytest.approx(1.2)
    bare = choice_jobs(CompletionRequest.model_validate({"model": "m", "prompt": "x"}), [[1]], 4, INFO, "c")
    assert not any(bare[0].request.sampling.HasField(f) for f in fields)  # absent: off


def test_completion_logprobs_reach_the_verifier() -> None:
    body = CompletionRequest.model_validate({"model": "m", "prompt": "x", "logprobs": 0})
    (job,) = choice_jobs(body, [[1, 2]], 4, INFO, "cmpl-x")
    assert job.request.sampling.HasField("logprobs") and job.request.sampling.logprobs == 0
    assert not job.request.sampling.HasField("prompt_logprobs") and job.echo is None


@pytest.mark.parametrize(("logprobs", "want"), [(None, None), (3, 3)])
def test_echo_asks_for_the_prompt_s_logprobs_with_logprobs(logprobs: int | None, want: int | None) -> None:
    body = CompletionRequest.model_validate(
        {"model": "m", "prompt": ["a", "b"], "echo": True, "logprobs": logprobs}
    )
    jobs = choice_jobs(body, [[1, 2], [3]], 4, INFO, "cmpl-x", ["a", "b"])
    assert [job.echo for job in jobs] == ["a", "b"]
    sampling = jobs[0].request.sampling
    assert (sampling.prompt_logprobs if sampling.HasField("prompt_logprobs") else None) == want


def test_no_limit_means_the_rest_of_the_context_and_ignore_eos_keeps_eos() -> None:
    body = CompletionRequest.model_validate(
        {"model": "m", "prompt": "x", "ignore_eos": True, "speculation": {"enabled": False, "num_steps": 2}}
    )
    (job,) = choice_jobs(body, [[1] * 10], None, INFO, "r")
    assert job.request.sampling.max_new_tokens == 40
    assert job.end_token_ids == frozenset()
    assert not job.request.sampling.HasField("seed")
    assert job.request.speculation.enabled is False and job.request.speculation.num_steps == 2


@pytest.mark.parametrize(
    ("prompt", "code"),
    [([], "invalid_value"), ([100], "invalid_value"), ([1] * 50, "context_length_exceeded")],
)
def test_prompts_the_verifier_could_not_take(prompt: list[int], code: str) -> None:
    with pytest.raises(APIError) as caught:
        check_prompt(prompt, INFO, "prompt")
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, code, "prompt")


def test_a_prompt_one_short_of_the_context_is_fine() -> None:
    check_prompt([1] * 49, INFO, "prompt")


def test_a_token_limit_the_client_set_beyond_the_context_s_room_is_refused() -> None:
    check_token_limit(40, 10, "max_tokens", INFO)  # exactly the room: 40 + 10 = 50
    with pytest.raises(APIError) as caught:
        check_token_limit(40, 11, "max_completion_tokens", INFO)
    error = caught.value
    want = (400, "context_length_exceeded", "max_completion_tokens")
    assert (error.status, error.code, error.param) == want
    assert "maximum context length is 50 tokens" in error.message and "40 input tokens" in error.message
    check_token_limit(49, 10**6, None, INFO)  # a default limit: cut to the room by choice_jobs


def test_the_field_a_limit_error_names() -> None:
    def chat(**fields: int) -> ChatCompletionRequest:
        messages = [{"role": "user", "content": "x"}]
        return ChatCompletionRequest.model_validate({"model": "m", "messages": messages, **fields})

    assert chat().token_limit_param is None
    assert chat(max_tokens=5).token_limit_param == "max_tokens"
    assert chat(max_tokens=5, max_completion_tokens=6).token_limit_param == "max_completion_tokens"
    completion = CompletionRequest.model_validate({"model": "m", "prompt": "x"})
    assert (completion.token_limit, completion.token_limit_param) == (16, None)  # the default: cut
    native = NativeGenerateRequest.model_validate({"text": ["a", "b"], "sampling_params": [{}, {}]})
    params = [g.completion.token_limit_param for g in native.groups("m")]
    assert params == ["sampling_params.0.max_new_tokens", "sampling_params.1.max_new_tokens"]
    assert _limit_param(chat(max_tokens=5), "max_output_tokens", False) == "max_output_tokens"
    assert _limit_param(chat(max_tokens=5), None, True) is None  # --allow-auto-truncate
    assert _limit_param(chat(), "max_output_tokens", False) is None


def test_truncate_prompt_tokens_keeps_the_prompt_s_end() -> None:
    prompt = list(range(3, 63))  # 60 tokens: more than the context of 50
    assert truncated(prompt, None, INFO) == prompt
    assert truncated(prompt, 5, INFO) == prompt[-5:]
    assert truncated(prompt[:3], 5, INFO) == prompt[:3]
    assert truncated(prompt, -1, INFO) == prompt[-49:]  # room for one new token
    check_prompt(truncated(prompt, -1, INFO), INFO, "prompt")
    for bad in ({"truncate_prompt_tokens": 0}, {"truncate_prompt_tokens": -2}):
        with pytest.raises(ValueError, match="truncate_prompt_tokens"):
            CompletionRequest.model_validate({"model": "m", "prompt": "x", **bad})
    with pytest.raises(ValueError, match="echo"):
        CompletionRequest.model_validate(
            {"model": "m", "prompt": "x", "echo": True, "truncate_prompt_tokens": 2}
        )


def test_channel_targets() -> None:
    assert channel_target(["verifier:50051"]) == "dns:///verifier:50051"
    assert channel_target(["dns:///v:1"]) == "dns:///v:1"
    assert channel_target(["10.0.0.1:1", "10.0.0.2:2"]) == "ipv4:10.0.0.1:1,10.0.0.2:2"
    assert channel_target(["[::1]:1", "[::2]:2"]) == "ipv6:[::1]:1,[::2]:2"
    with pytest.raises(ValueError, match="IP addresses"):
        channel_target(["a:1", "b:2"])


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


@pytest.mark.parametrize(
    ("fields", "kind", "value"),
    [
        ({"response_format": {"type": "json_object"}}, "json_object", True),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}},
            "json_schema",
            SCHEMA,
        ),
        # A json_schema format without its schema: any JSON object, as OpenAI's own.
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "n"}}}, "json_object", True),
        ({"guided_json": SCHEMA}, "json_schema", SCHEMA),
        ({"guided_json": '{"type": "string"}'}, "json_schema", {"type": "string"}),
        ({"guided_regex": "[0-9]+"}, "regex", "[0-9]+"),
        ({"guided_choice": ["a", "b c"]}, "choice", ["a", "b c"]),
        ({"guided_grammar": 'root ::= "x"'}, "grammar", 'root ::= "x"'),
    ],
)
def test_structured_output_reaches_the_verifier(fields: dict[str, object], kind: str, value: object) -> None:
    for body in (
        ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": "x"}], **fields}
        ),
        CompletionRequest.model_validate({"model": "m", "prompt": "x", **fields}),
    ):
        (job,) = choice_jobs(body, [[1, 2]], 4, INFO, "x")
        constraint = job.request.sampling.constraint
        assert constraint.WhichOneof("kind") == kind
        got = getattr(constraint, kind)
        if kind == "json_schema":
            got = json.loads(got)
        elif kind == "choice":
            got = list(got.choices)
        assert got == value


def test_free_text_sends_no_constraint() -> None:
    for fields in ({}, {"response_format": {"type": "text"}}):
        body = CompletionRequest.model_validate({"model": "m", "prompt": "x", **fields})
        (job,) = choice_jobs(body, [[1, 2]], 4, INFO, "x")
        assert not job.request.sampling.HasField("constraint")

"""From an API request to the verifier's GenerateRequests: one per choice, with derived seeds."""

from __future__ import annotations

import json
from collections.abc import Sequence

from treespec.gateway.errors import APIError
from treespec.gateway.generation import ChoiceJob
from treespec.gateway.schemas import SamplingFields
from treespec.gateway.verifier_client import ModelInfo
from treespec.v1 import verifier_pb2

_INT64 = 1 << 64


def derive_seed(seed: int, index: int) -> int:
    """Choice `index`'s seed: distinct per choice, `seed` itself for the first, within int64."""
    wrapped = (seed + index) % _INT64
    return wrapped - _INT64 if wrapped >= _INT64 // 2 else wrapped


def check_prompt(prompt_ids: Sequence[int], info: ModelInfo, param: str) -> None:
    """Refuse what the verifier cannot take: an empty prompt, unknown ids, no room to generate."""
    if not prompt_ids:
        raise APIError(400, "The prompt must not be empty.", code="invalid_value", param=param)
    check_token_ids(prompt_ids, info, param)
    if len(prompt_ids) >= info.context_length:
        raise APIError(
            400,
            f"This model's maximum context length is {info.context_length} tokens. However, your "
            f"prompt has {len(prompt_ids)} tokens. Please reduce the length of the prompt.",
            code="context_length_exceeded",
            param=param,
        )


def check_token_limit(prompt_len: int, token_limit: int | None, param: str | None, info: ModelInfo) -> None:
    """Refuse a token limit the client set (`param`: its field; None: a default limit, which is cut
    to the context's room) beyond the room the context leaves after the prompt, as vLLM and SGLang
    refuse it; `treespec gateway --allow-auto-truncate` cuts it instead (SGLang's flag)."""
    room = info.context_length - prompt_len
    if param is None or token_limit is None or token_limit <= room:
        return
    raise APIError(
        400,
        f"'{param}' is too large: {token_limit}. This model's maximum context length is "
        f"{info.context_length} tokens and your request has {prompt_len} input tokens "
        f"({token_limit} > {info.context_length} - {prompt_len}).",
        code="context_length_exceeded",
        param=param,
    )


def truncated(prompt_ids: list[int], keep: int | None, info: ModelInfo) -> list[int]:
    """The prompt's last `keep` tokens (vLLM's truncate_prompt_tokens; -1: as many as leave room
    for one new token; None: all of them)."""
    if keep is None:
        return prompt_ids
    if keep == -1:
        keep = max(1, info.context_length - 1)
    return prompt_ids[-keep:]


def check_token_ids(token_ids: Sequence[int], info: ModelInfo, param: str) -> None:
    if token_ids and max(token_ids) >= info.vocab_size > 0:
        message = f"Token ids must be below the vocabulary size {info.vocab_size}."
        raise APIError(400, message, code="invalid_value", param=param)


def check_min_tokens(min_tokens: int | None, token_limit: int | None) -> None:
    """vLLM's min_tokens may not exceed the request's token limit."""
    if min_tokens and token_limit is not None and min_tokens > token_limit:
        message = f"min_tokens ({min_tokens}) must be at most the token limit ({token_limit})."
        raise APIError(400, message, code="invalid_value", param="min_tokens")


def choice_jobs(
    body: SamplingFields,
    prompts: Sequence[list[int]],
    token_limit: int | None,
    info: ModelInfo,
    request_id: str,
    echoes: Sequence[str] | None = None,
    grammar_after: str = "",
    bad_words: Sequence[Sequence[int]] = (),
    prediction: Sequence[int] = (),
) -> list[ChoiceJob]:
    """`n` jobs per prompt, indexed prompt by prompt (OpenAI's order for batched prompts); `echoes`:
    each prompt's text, to send before its completions (completions' `echo`); `grammar_after`: see
    `sampling_params`; `prediction`: a predicted output's tokens (prediction.py)."""
    end_ids = frozenset(body.stop_token_ids or ()) | (
        frozenset() if body.ignore_eos else frozenset(info.eos_token_ids)
    )
    jobs = []
    echo_only = echoes is not None and token_limit == 0  # the verifier makes one token, never sent
    for p, prompt_ids in enumerate(prompts):
        max_new = max(1, _max_new_tokens(token_limit, len(prompt_ids), info.context_length))
        for i in range(body.n):
            index = p * body.n + i
            request = verifier_pb2.GenerateRequest(
                request_id=f"{request_id}-{index}",
                prompt_token_ids=prompt_ids,
                sampling=sampling_params(body, max_new, index, grammar_after, bad_words),
                speculation=speculation_params(body),
                cache_salt=body.cache_salt or "",
                priority=body.priority,
                prediction_token_ids=prediction,
            )
            echo = None if echoes is None else echoes[p]
            job = ChoiceJob(
                index,
                request,
                body.stop_strings,
                end_ids,
                echo,
                body.min_tokens or 0,
                include_stop_str=body.include_stop_str_in_output,
                stop_regexes=body.stop_patterns,
                skip_special_tokens=body.skip_special_tokens,
                prompt_logprobs=body.prompt_logprobs is not None,
                echo_only=echo_only,
            )
            jobs.append(job)
    return jobs


def sampling_params(
    body: SamplingFields,
    max_new_tokens: int,
    index: int,
    grammar_after: str = "",
    bad_words: Sequence[Sequence[int]] = (),
) -> verifier_pb2.SamplingParams:
    """`grammar_after`: a thinking model's end of reasoning, after which a constraint holds;
    `bad_words`: the request's bad words as token sequences (bad_words.py)."""
    params = verifier_pb2.SamplingParams(
        max_new_tokens=max_new_tokens,
        stop_token_ids=body.stop_token_ids or (),
        ignore_eos=body.ignore_eos,
        allowed_token_ids=body.allowed_token_ids or (),
        bad_words=[verifier_pb2.TokenSequence(token_ids=word) for word in bad_words],
    )
    optional = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
        "min_p": body.min_p,
        "presence_penalty": body.presence_penalty,
        "frequency_penalty": body.frequency_penalty,
        "repetition_penalty": body.repetition_penalty,
        "seed": None if body.seed is None else derive_seed(body.seed, index),
        "logprobs": body.logprob_count,
        "prompt_logprobs": body.prompt_logprob_count,
        "min_tokens": body.min_tokens,
    }
    for name, value in optional.items():
        if value is not None:  # absent: the verifier's default
            setattr(params, name, value)
    for token, amount in (body.logit_bias or {}).items():
        params.logit_bias[int(token)] = amount
    if body.constraint is not None:
        params.constraint.CopyFrom(output_constraint(*body.constraint))
        params.constraint.starts_after = grammar_after
    return params


def output_constraint(kind: str, value: object) -> verifier_pb2.OutputConstraint:
    """The wire's form of a structured-output request: a schema travels as JSON text."""
    if kind == "json_schema":
        text = value if isinstance(value, str) else json.dumps(value)
        return verifier_pb2.OutputConstraint(json_schema=text)
    if kind == "json_object":
        return verifier_pb2.OutputConstraint(json_object=True)
    if kind == "choice":
        assert isinstance(value, list)
        return verifier_pb2.OutputConstraint(choice=verifier_pb2.ChoiceList(choices=value))
    assert isinstance(value, str)
    if kind == "regex":
        return verifier_pb2.OutputConstraint(regex=value)
    return verifier_pb2.OutputConstraint(grammar=value)


def speculation_params(body: SamplingFields) -> verifier_pb2.SpeculationParams:
    options = body.speculation
    if options is None:
        return verifier_pb2.SpeculationParams()
    fields = options.model_dump(exclude_none=True)
    return verifier_pb2.SpeculationParams(**fields)


def _max_new_tokens(token_limit: int | None, prompt_len: int, context_length: int) -> int:
    """The request's limit, within what the context leaves (the verifier stops there anyway)."""
    room = context_length - prompt_len  # >= 1: check_prompt refused longer prompts
    return room if token_limit is None else min(token_limit, room)

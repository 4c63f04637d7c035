"""OpenAI response bodies and stream chunks, plus `meta_info` with the speculation figures (as SGLang)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from treespec.gateway.prediction import CompletionTokensDetails


class PromptTokensDetails(BaseModel):
    cached_tokens: int  # prompt tokens whose K/V the verifier's prefix cache held


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails | None = None  # with a predicted output

    @classmethod
    def of(
        cls,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int = 0,
        completion_details: CompletionTokensDetails | None = None,
    ) -> Usage:
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached_tokens),
            completion_tokens_details=completion_details,
        )


class MetaInfo(BaseModel):
    """Speculation figures of a response (summed over its choices)."""

    spec_verify_steps: int
    spec_accept_length: float  # tokens committed per verify step, the bonus token included
    spec_accepted_tokens: int
    spec_drafted_tokens: int


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob]
    refusal: None = None


class PromptLogprob(BaseModel):
    """vLLM's entry for a prompt token or one of its alternatives."""

    logprob: float
    rank: int | None  # in the vocabulary, 1: the most likely (None: unknown)
    decoded_token: str


# vLLM's prompt_logprobs: per prompt token (None for the first), token id -> its entry; the prompt's
# own token and the most likely alternatives.
PromptLogprobs = list[dict[str, PromptLogprob] | None]


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]  # None: an echoed prompt's first token
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    # vLLM's and SGLang's: the thinking of a reasoning model, split off by --reasoning-parser.
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # OpenAI's shape: id, type "function", function
    # OpenAI's deprecated shape of one call, for a request that gave `functions`: name, arguments.
    function_call: dict[str, str] | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    logprobs: ChatLogprobs | None = None
    finish_reason: str
    token_ids: list[int] | None = None  # vLLM's return_token_ids: the output's tokens


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: None = None
    meta_info: MetaInfo | None = None
    prompt_logprobs: PromptLogprobs | None = None  # vLLM's, when asked for
    prompt_token_ids: list[int] | None = None  # vLLM's return_token_ids


class ChatChunkChoice(BaseModel):
    index: int
    delta: dict[str, Any]
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None  # vLLM's return_token_ids: the tokens since the chunk before


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    system_fingerprint: None = None
    meta_info: MetaInfo | None = None
    prompt_token_ids: list[int] | None = None  # vLLM's return_token_ids: on a choice's first chunk


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    prompt_logprobs: PromptLogprobs | None = None  # vLLM's, when asked for (not streamed)
    # vLLM's return_token_ids: the prompt's tokens (streamed: on the choice's first chunk), and the
    # output's (streamed: those since the chunk before).
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None


class Completion(BaseModel):
    """A /v1/completions response; with finish_reason None in its choices, a stream chunk."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: None = None
    meta_info: MetaInfo | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "treespec"
    root: str | None = None  # the model the name serves (vLLM's: its path)
    parent: str | None = None  # vLLM's: the base model of an adapter (none here)
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]

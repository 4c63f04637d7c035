"""The /v1/completions request (OpenAI's legacy completions, with vLLM's and SGLang's fields through
SamplingFields): a prompt or a batch of them, as text or token ids; `echo`, `logprobs`, `best_of`.
`max_tokens: 0` with `echo` scores the prompt without generating (OpenAI's legacy use, which
lm-evaluation-harness's loglikelihood requests made): the prompt comes back, with its tokens'
log-probabilities when `logprobs` is set, and no completion."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from treespec.gateway.schema_types import TokenId, UnicodeText, unsupported
from treespec.gateway.schemas import (
    DEFAULT_COMPLETION_MAX_TOKENS,
    MAX_CHOICES,
    MAX_N,
    MAX_PROMPTS,
    MAX_TOKENS_LIMIT,
    SamplingFields,
)
from treespec.shared.rpc.limits import MAX_TOP_LOGPROBS

Prompt = UnicodeText | list[UnicodeText] | list[TokenId] | list[list[TokenId]]


class CompletionRequest(SamplingFields):
    prompt: Prompt
    # 0: the prompt scored, nothing generated (with `echo` only).
    max_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS_LIMIT)
    best_of: int | None = Field(default=None, ge=1, le=MAX_N)
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    # The prompt before the completion (with its tokens' logprobs when asked); checked when left out
    # too (max_tokens 0 needs it).
    echo: bool | None = Field(default=None, validate_default=True)
    # Not implemented: of OpenAI's types, and accepted at their neutral value only.
    suffix: str | None = None

    _check_completion_unsupported = field_validator("suffix")(unsupported)

    @property
    def logprob_count(self) -> int | None:
        return self.logprobs

    @property
    def prompt_logprob_count(self) -> int | None:
        counts = [c for c in (self.logprobs if self.echo else None, self.prompt_logprobs) if c is not None]
        return max(counts, default=None)

    @field_validator("prompt")
    @classmethod
    def _prompt_not_empty(cls, value: Prompt) -> Prompt:
        if isinstance(value, list):
            if not value or any(isinstance(item, list | str) and not item for item in value):
                raise ValueError("the prompt must not be empty")
            if len(value) > MAX_PROMPTS and not isinstance(value[0], int):
                raise ValueError(f"at most {MAX_PROMPTS} prompts per request")
        return value

    @model_validator(mode="after")
    def _echo_echoes_the_whole_prompt(self) -> CompletionRequest:
        if self.echo and self.truncate_prompt_tokens is not None:
            raise PydanticCustomError(
                "invalid_value",
                "'echo' sends back the prompt as given: it cannot be combined with 'truncate_prompt_tokens'",
            )
        return self

    @field_validator("echo")
    @classmethod
    def _nothing_to_generate_only_with_echo(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        if info.data.get("max_tokens") == 0 and not value:
            raise PydanticCustomError(
                "invalid_value", "'max_tokens' 0 generates nothing: it is for scoring a prompt with 'echo'"
            )
        return value

    @property
    def echo_only(self) -> bool:
        """The prompt sent back (and scored), nothing generated."""
        return self.max_tokens == 0

    @model_validator(mode="after")
    def _best_of_is_n(self) -> CompletionRequest:
        if self.best_of is not None and self.best_of != self.n:
            raise PydanticCustomError("unsupported_parameter", "'best_of' other than 'n' is not supported")
        return self

    @model_validator(mode="after")
    def _choices_within_limit(self) -> CompletionRequest:
        if len(self.prompts) * self.n > MAX_CHOICES:
            raise ValueError(f"at most {MAX_CHOICES} choices (prompts times n) per request")
        return self

    @property
    def token_limit(self) -> int:
        return self.max_tokens if self.max_tokens is not None else DEFAULT_COMPLETION_MAX_TOKENS

    @property
    def prompts(self) -> list[str | list[int]]:
        """The batch: one string or token-id list per prompt."""
        if isinstance(self.prompt, str):
            return [self.prompt]
        if all(isinstance(item, int) for item in self.prompt):
            return [list(self.prompt)]  # type: ignore[arg-type]
        return list(self.prompt)  # type: ignore[arg-type]

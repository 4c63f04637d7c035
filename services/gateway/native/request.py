"""SGLang's native `POST /generate` request (io_struct.GenerateReqInput), and the completions request
it runs as.

`text` (one prompt or a batch) or `input_ids` (one token-id list or a batch), tokenized as
completions tokenize them: no chat template. `sampling_params` is one dict for every prompt, with
SGLang's names (`max_new_tokens`, default 128, `min_new_tokens`, `no_stop_trim`, `json_schema`,
`regex`, `ebnf`, `sampling_seed`, and the names OpenAI's and vLLM's fields share); each becomes its
completions counterpart, so the request is generated exactly as that completion would be, and an
error names the field by its SGLang name. `return_logprob` asks for the output tokens'
log-probabilities with `top_logprobs_num` alternatives, and for the prompt's from
`logprob_start_len` on (-1: none). Unknown fields are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from treespec.gateway.completion_request import CompletionRequest
from treespec.gateway.errors import APIError, validation_error
from treespec.gateway.schema_types import STRICT, TokenId, UnicodeText
from treespec.gateway.schemas import INT32_MAX, INT32_MIN, MAX_CHOICES, MAX_TOKENS_LIMIT
from treespec.shared.rpc.limits import MAX_TOP_LOGPROBS

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's
# SGLang's sampling_params names that differ from the completions field they stand for.
_RENAMED = {
    "max_new_tokens": "max_tokens",
    "min_new_tokens": "min_tokens",
    "no_stop_trim": "include_stop_str_in_output",
    "json_schema": "guided_json",
    "regex": "guided_regex",
    "ebnf": "guided_grammar",
    "sampling_seed": "seed",
}
_SAME = (
    "stop",
    "stop_regex",
    "stop_token_ids",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "n",
    "ignore_eos",
    "skip_special_tokens",
    "logit_bias",
)
_NATIVE_NAMES = {completion: native for native, completion in _RENAMED.items()}


class NativeGenerateRequest(BaseModel):
    model_config = STRICT
    text: UnicodeText | list[UnicodeText] | None = None
    input_ids: list[TokenId] | list[list[TokenId]] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None  # one for all, or one a prompt
    stream: bool = False
    rid: Annotated[str, Field(min_length=1)] | list[Annotated[str, Field(min_length=1)]] | None = None
    return_logprob: bool = False
    logprob_start_len: int = Field(default=-1, ge=-1)
    top_logprobs_num: int = Field(default=0, ge=0, le=MAX_TOP_LOGPROBS)
    return_text_in_logprobs: bool = False
    # As on completions (vLLM's priority scheduling); bounded here, where an error names it.
    priority: int | None = Field(default=None, ge=INT32_MIN, le=INT32_MAX)

    @model_validator(mode="after")
    def _one_kind_of_prompt(self) -> NativeGenerateRequest:
        if (self.text is None) == (self.input_ids is None):
            raise PydanticCustomError("invalid_value", "give exactly one of 'text' and 'input_ids'")
        if isinstance(self.rid, list) and len(self.rid) != len(self.prompts):
            raise PydanticCustomError("invalid_value", "'rid' must hold one id per prompt")
        if isinstance(self.sampling_params, list) and len(self.sampling_params) != len(self.prompts):
            raise PydanticCustomError(
                "invalid_value", "a list of 'sampling_params' must hold one dict per prompt"
            )
        return self

    @property
    def batch(self) -> bool:
        """Whether the prompts came as a list (the answer is a list then, as it is for n > 1)."""
        return isinstance(self.text, list) or bool(self.input_ids and isinstance(self.input_ids[0], list))

    @property
    def prompts(self) -> list[str | list[int]]:
        if isinstance(self.text, str):
            return [self.text]
        if self.text is not None:
            return list(self.text)
        assert self.input_ids is not None
        if self.batch:
            return [list(ids) for ids in self.input_ids]  # type: ignore[arg-type]
        return [list(self.input_ids)]  # type: ignore[arg-type]

    @property
    def prompt_logprobs(self) -> bool:
        return self.return_logprob and self.logprob_start_len >= 0

    def rids(self, default: str) -> list[str]:
        """Each prompt's request id: the client's, or `default` with the prompt's index."""
        if isinstance(self.rid, str):
            return [self.rid]
        if self.rid is not None:
            return list(self.rid)
        return [f"{default}-{p}" for p in range(len(self.prompts))] if self.batch else [default]

    def groups(self, model: str) -> list[PromptGroup]:
        """The prompts in groups that share their sampling parameters, each with the completion it
        runs as: every prompt in one group for one dict, a group a prompt for a list."""
        if isinstance(self.sampling_params, list):
            groups = [
                PromptGroup((p,), self._completion(params, f"sampling_params.{p}", model))
                for p, params in enumerate(self.sampling_params)
            ]
        else:
            every = tuple(range(len(self.prompts)))
            groups = [
                PromptGroup(every, self._completion(self.sampling_params or {}, "sampling_params", model))
            ]
        if sum(len(g.prompts) * g.completion.n for g in groups) > MAX_CHOICES:
            message = f"at most {MAX_CHOICES} outputs (prompts times n) per request"
            raise APIError(400, message, code="invalid_value", param="sampling_params")
        return groups

    def _completion(self, given: dict[str, Any], where: str, model: str) -> NativeCompletion:
        """The completions request one dict of sampling parameters stands for (a 400 naming the
        SGLang field, `where` it is, on a bad value)."""
        unknown = sorted(set(given) - set(_RENAMED) - set(_SAME))
        if unknown:
            raise APIError(
                400,
                f"Unrecognized sampling parameter: '{unknown[0]}'",
                code="unknown_parameter",
                param=f"{where}.{unknown[0]}",
            )
        body = {_RENAMED.get(name, name): value for name, value in given.items()}
        body.setdefault("max_tokens", DEFAULT_MAX_NEW_TOKENS)
        if self.priority is not None:
            body["priority"] = self.priority
        if self.return_logprob:
            body |= {"logprobs": self.top_logprobs_num, "input_logprobs": self.prompt_logprobs}
        try:  # the prompts go to the run as token ids: the completion's own prompt is a placeholder
            request = NativeCompletion.model_validate({**body, "model": model, "prompt": [0]})
        except ValidationError as exc:
            error = validation_error(exc.errors())
            if error.param is not None:
                head, _, rest = error.param.partition(".")
                error.param = ".".join([where, _NATIVE_NAMES.get(head, head), *filter(None, [rest])])
            raise error from None
        request._limit_field = f"{where}.max_new_tokens"
        return request


@dataclass(frozen=True)
class PromptGroup:
    prompts: tuple[int, ...]  # places in the request's prompts
    completion: NativeCompletion


class NativeCompletion(CompletionRequest):
    """A completion that also returns its prompt's log-probabilities without echoing the prompt."""

    input_logprobs: bool = False
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)  # SGLang's max_new_tokens: 1 on
    # Where the request's max_new_tokens stands, for an error about it (SGLang refuses one beyond the
    # context too, its default of 128 included).
    _limit_field: str = PrivateAttr(default="sampling_params.max_new_tokens")

    @property
    def token_limit_param(self) -> str | None:
        return self._limit_field

    @property
    def prompt_logprob_count(self) -> int | None:
        return self.logprobs if self.input_logprobs else None


class AbortRequest(BaseModel):
    """SGLang's /abort_request body: a request's `rid`, or `abort_all`."""

    model_config = STRICT
    rid: str = ""
    abort_all: bool = False

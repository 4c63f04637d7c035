"""OpenAI request bodies for /v1/chat/completions and /v1/completions (pydantic v2, strict).

Unknown fields are refused (OpenAI: "Unrecognized request argument supplied"); fields that OpenAI
knows but treespec does not implement (audio, ...) are accepted only at their neutral value, else
refused as unsupported. Tools are called with a named function or "required" (tool_calls.py), or
"auto" where the gateway has a tool-call parser (auto_tool_calls.py); OpenAI's deprecated `functions`
and `function_call` are read as the tools and tool choice they stand for (function_calls.py gives
their calls back in the legacy shape).
Structured output (structured_outputs.py): OpenAI's `response_format`, vLLM's guided_json,
guided_regex, guided_choice and guided_grammar, and vLLM's newer `structured_outputs`, one at a
time (SGLang's regex, ebnf and json_schema too). SGLang's names for vLLM's fields and vLLM's one-way
switches: vendor_fields.py; how a reply gives back a thinking model's reasoning (vLLM's
include_reasoning, SGLang's separate_reasoning and stream_reasoning): reasoning_reply.py.
Extensions after vLLM and SGLang: top_k, min_p, repetition_penalty, min_tokens, ignore_eos,
stop_token_ids, include_stop_str_in_output, skip_special_tokens, return_tokens_as_token_ids,
return_token_ids (token_ids_out.py), truncate_prompt_tokens, and a per-request
`speculation` object; OpenAI's
`reasoning_effort` is a chat template variable; its newer service fields (prompt-cache hints, stream
obfuscation, verbosity) are taken as service_hints.py says; vLLM's add_generation_prompt and
continue_final_message say how the prompt ends (prompt_ending.py), and its chat `echo` starts the
reply with a continued assistant message. A null
stands for the field's default, as in OpenAI; text with a lone surrogate (valid JSON, not valid
Unicode) is refused.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from treespec.gateway.chat_messages import ChatMessage
from treespec.gateway.chat_template import ChatTemplateField, TemplateOptions
from treespec.gateway.errors import quotable
from treespec.gateway.prediction import Prediction
from treespec.gateway.prompt_ending import PromptEndingFields
from treespec.gateway.reasoning_reply import ReasoningFields
from treespec.gateway.request_options import ReasoningEffort, SpeculationOptions, StreamOptions
from treespec.gateway.schema_types import (
    MAX_HINT_CHARS,
    STRICT,
    Metadata,
    TemplateDocuments,
    TemplateKwargs,
    TokenId,
    UnicodeText,
    null_is_default,
    unsupported,
)
from treespec.gateway.service_hints import (
    PromptCacheOptions,
    PromptCacheRetention,
    Verbosity,
    absent_only,
    default_verbosity_only,
)
from treespec.gateway.stop_fields import StopFields
from treespec.gateway.structured_outputs import Constraint, ConstraintFields
from treespec.gateway.tool_calls import ANY_OBJECT, ToolCallMode
from treespec.gateway.tool_schemas import (
    MAX_TOOLS,
    ChosenFunction,
    FunctionDef,
    NamedToolChoice,
    ToolDef,
    template_tools,
)
from treespec.gateway.vendor_fields import VendorFields
from treespec.shared.rpc.limits import MAX_BAD_WORDS, MAX_TOP_LOGPROBS

MAX_N = 128  # OpenAI's bound on n (vLLM sets none)
MAX_STOP_TOKEN_IDS = 64
MAX_PROMPTS = 256  # prompts in one /v1/completions batch (vLLM sets none; harnesses send dozens)
MAX_CHOICES = 256  # prompts x n: the Generate calls one request may open
MAX_TOKENS_LIMIT = 2**31 - 1
MAX_REPETITION_PENALTY = 100.0  # far past any use; keeps the value finite
MAX_LOGIT_BIAS = 1024  # tokens one request may bias
MAX_ALLOWED_TOKEN_IDS = 1 << 18  # more than any vocabulary served
MAX_CACHE_SALT_CHARS = 1024
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice

# OpenAI's deprecated function-calling fields, and the newer ones each stands for.
_LEGACY_TOOL_FIELDS = {"functions": "tools", "function_call": "tool_choice"}


class SamplingFields(ConstraintFields, VendorFields, StopFields):
    """Fields common to both endpoints (structured output's: structured_outputs.py; SGLang's names for
    vLLM's fields and vLLM's one-way switches: vendor_fields.py)."""

    model_config = STRICT
    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    user: str | None = None
    # Extensions (vLLM / SGLang). vLLM's request_id names the response: "chatcmpl-<request_id>".
    request_id: UnicodeText | None = Field(default=None, min_length=1, max_length=MAX_HINT_CHARS)
    top_k: int | None = Field(default=None, ge=-1, le=2**31 - 1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    ignore_eos: bool = False
    stop_token_ids: list[TokenId] | None = Field(default=None, max_length=MAX_STOP_TOKEN_IDS)
    speculation: SpeculationOptions | None = None
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=MAX_REPETITION_PENALTY)
    min_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS_LIMIT)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    return_tokens_as_token_ids: bool = False  # vLLM's: log-probabilities name tokens "token_id:N"
    return_token_ids: bool = False  # vLLM's: the prompt's and the output's token ids beside the text
    # vLLM's: keep only the prompt's last N tokens (-1: as many as leave room for one new token).
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=MAX_TOKENS_LIMIT)
    prompt_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)  # vLLM's
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = Field(default=None, max_length=MAX_LOGIT_BIAS)
    # vLLM's: words no output may hold (each tokenized as written and after a space; bad_words.py),
    # and the only tokens an output may hold.
    bad_words: list[UnicodeText] | None = Field(default=None, max_length=MAX_BAD_WORDS // 2)
    allowed_token_ids: list[TokenId] | None = Field(
        default=None, min_length=1, max_length=MAX_ALLOWED_TOKEN_IDS
    )
    # vLLM's: under the verifier's priority scheduling policy, lower values go first (0 otherwise).
    priority: int = Field(default=0, ge=INT32_MIN, le=INT32_MAX)
    # vLLM's: cached state (prefix cache, the n-gram memory) shared only with requests of the same salt.
    cache_salt: UnicodeText | None = Field(default=None, min_length=1, max_length=MAX_CACHE_SALT_CHARS)
    _defaults_for_null = field_validator(
        "n",
        "priority",
        "stream",
        "ignore_eos",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "return_tokens_as_token_ids",
        "return_token_ids",
        mode="before",
    )(null_is_default)

    @model_validator(mode="after")
    def _vendor_names(self) -> SamplingFields:
        """SGLang's names fold into vLLM's, which the rest of the gateway reads."""
        self.request_id = self.one_value("request_id", "rid", self.request_id, self.rid, None)
        self.include_stop_str_in_output = self.one_value(
            "include_stop_str_in_output",
            "no_stop_trim",
            self.include_stop_str_in_output,
            self.no_stop_trim,
            False,
        )
        return self

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise PydanticCustomError(
                "stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled."
            )
        if self.prompt_logprobs is not None and self.stream:
            raise PydanticCustomError(
                "prompt_logprobs",
                "'prompt_logprobs' are not available when 'stream' is enabled (as in vLLM).",
            )
        return self

    @field_validator("truncate_prompt_tokens")
    @classmethod
    def _keeps_some_tokens(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("truncate_prompt_tokens must be -1 or at least 1")
        return value

    @field_validator("bad_words")
    @classmethod
    def _words_have_text(cls, value: list[str] | None) -> list[str] | None:
        if any(not word.strip() for word in value or []):
            raise ValueError("bad_words must not hold an empty or blank word")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _token_ids_and_amounts(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key, amount in (value or {}).items():
            if not (key.isascii() and key.isdigit()):
                raise ValueError(f"logit_bias keys must be token ids, got {quotable(key)!r}")
            if not -100.0 <= amount <= 100.0:
                raise ValueError(f"logit_bias amounts must be in [-100, 100], got {amount}")
        return value

    @property
    def logprob_count(self) -> int | None:
        """Alternatives to return per output token with its log-probability; None: no log-probabilities."""
        return None

    @property
    def token_limit_param(self) -> str | None:
        """The field the client set its token limit in; None: it set none, and the limit is the
        endpoint's default (cut to the room the context leaves, never refused)."""
        return "max_tokens" if self.max_tokens is not None else None

    @property
    def prompt_logprob_count(self) -> int | None:
        """The same for the prompt's tokens (vLLM's `prompt_logprobs`; completions' `echo`)."""
        return self.prompt_logprobs

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def continuous_usage(self) -> bool:
        """Every streamed chunk carries its choice's usage so far (vLLM's continuous_usage_stats)."""
        return (
            self.include_usage
            and self.stream_options is not None
            and self.stream_options.continuous_usage_stats
        )


class ChatCompletionRequest(SamplingFields, PromptEndingFields, ChatTemplateField, ReasoningFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    # `store`: the completion kept for GET /v1/chat/completions/{id} (chat_store/), with `metadata`.
    metadata: Metadata | None = None
    store: bool | None = None
    # Accepted and ignored (hints for OpenAI's own service: tiers, abuse detection, routing to its
    # caches; this server's prefix cache needs no hint, and `cache_salt` isolates).
    service_tier: str | None = None
    parallel_tool_calls: bool | None = None
    safety_identifier: str | None = Field(default=None, max_length=MAX_HINT_CHARS)
    prompt_cache_key: str | None = Field(default=None, max_length=MAX_HINT_CHARS)
    prompt_cache_retention: PromptCacheRetention | None = None  # prompt caching: service_hints.py
    prompt_cache_options: PromptCacheOptions | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    # Function calling: a named function or "required" (structured output, tool_calls.py), or "auto".
    tools: list[ToolDef] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = None
    chat_template_kwargs: TemplateKwargs | None = None  # vLLM's and SGLang's
    documents: TemplateDocuments | None = None  # vLLM's: for a retrieval-augmented chat template
    # vLLM's: the tokenizer's special tokens (a BOS) on top of what the chat template wrote.
    add_special_tokens: bool | None = None
    # OpenAI's effort for reasoning models: the chat template's variable `reasoning_effort` (gpt-oss's
    # template reads it; a template that does not ignores it).
    reasoning_effort: ReasoningEffort | None = None
    # vLLM's: the reply starts with the final message's text when that is the assistant's (with
    # continue_final_message, the whole assistant message comes back).
    echo: bool | None = None
    # OpenAI's deprecated function calling: tools of type "function", and a tool_choice without
    # "required"; declared after `tools` and `tool_choice`, which their validator reads.
    functions: list[FunctionDef] | None = Field(default=None, max_length=MAX_TOOLS)
    function_call: Literal["none", "auto"] | ChosenFunction | None = None
    # Not implemented: of OpenAI's types, and accepted at their neutral value only.
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    moderation: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None  # an empty object asks for a web search too
    verbosity: Verbosity | None = None  # "medium", OpenAI's default, only (service_hints.py)
    # OpenAI's Predicted Outputs: text the reply is expected to repeat, drafted from (prediction.py).
    prediction: Prediction | None = None

    _check_chat_unsupported = field_validator("modalities", "audio", "moderation")(unsupported)
    _check_verbosity = field_validator("verbosity")(default_verbosity_only)
    _check_web_search = field_validator("web_search_options")(absent_only)

    @field_validator("functions", "function_call")
    @classmethod
    def _legacy_fields_alone(cls, value: Any, info: ValidationInfo) -> Any:
        """A request calls functions the deprecated way or the newer one, not both; and, as OpenAI
        answers, function_call needs functions. Checked field by field, so that the error names the
        deprecated field (a field that failed its own validation is missing from `info.data`, and
        its own error is the one reported)."""
        if value is None:
            return value
        field = str(info.field_name)
        for newer in _LEGACY_TOOL_FIELDS.values():
            if info.data.get(newer) is not None:
                raise PydanticCustomError(
                    "invalid_value",
                    "'{field}' and '{newer}' cannot both be provided. '{field}' is deprecated; use the"
                    " '{instead}' parameter instead.",
                    {"field": field, "newer": newer, "instead": _LEGACY_TOOL_FIELDS[field]},
                )
        if field == "function_call" and "functions" in info.data and info.data["functions"] is None:
            raise PydanticCustomError(
                "invalid_value", "'function_call' is only allowed when 'functions' are specified."
            )
        return value

    @model_validator(mode="after")
    def _one_reasoning_effort(self) -> ChatCompletionRequest:
        given = (self.chat_template_kwargs or {}).get("reasoning_effort", self.reasoning_effort)
        if self.reasoning_effort is not None and given != self.reasoning_effort:
            raise PydanticCustomError(
                "invalid_value",
                "'reasoning_effort' and chat_template_kwargs['reasoning_effort'] differ; give one of them",
            )
        return self

    @property
    def echoed(self) -> str:
        """The text the reply starts with (`echo`): the final message's, if it is the assistant's."""
        last = self.messages[-1]
        return last.text if self.echo and last.role == "assistant" else ""

    @property
    def template_kwargs(self) -> dict[str, Any] | None:
        """More variables for the chat template: `chat_template_kwargs` and `reasoning_effort`."""
        if self.reasoning_effort is None:
            return self.chat_template_kwargs
        return {**(self.chat_template_kwargs or {}), "reasoning_effort": self.reasoning_effort}

    @model_validator(mode="after")
    def _top_logprobs_need_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise PydanticCustomError("invalid_value", "'logprobs' must be true when 'top_logprobs' is used")
        return self

    @model_validator(mode="after")
    def _tool_choice_fits_the_tools(self) -> ChatCompletionRequest:
        names = [t.function.name for t in self.offered_tools or []]
        choice = self.chosen_tool
        tools_field, choice_field = self._tool_fields
        if len(set(names)) < len(names):
            raise PydanticCustomError(
                "invalid_value", "the function names of '{tools}' must be distinct", {"tools": tools_field}
            )
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise PydanticCustomError(
                "invalid_value",
                "{choice} names '{name}', which is not among the {tools}",
                {"choice": choice_field, "name": quotable(choice.function.name), "tools": tools_field},
            )
        if choice == "required" and not names:
            raise PydanticCustomError("invalid_value", "tool_choice 'required' needs tools")
        if self.tool_call_mode is not None and super().constraint is not None:
            raise PydanticCustomError(
                "invalid_value", "a tool call cannot be combined with response_format or guided decoding"
            )
        return self

    @property
    def legacy_functions(self) -> bool:
        """The tools were given as the deprecated `functions`: their calls go back as OpenAI's
        legacy `function_call` (function_calls.py)."""
        return self.functions is not None

    @property
    def offered_tools(self) -> list[ToolDef] | None:
        """The tools, given as `tools` or as the deprecated `functions` (each one a function tool)."""
        if self.functions is None:
            return self.tools
        return [ToolDef(type="function", function=function) for function in self.functions]

    @property
    def chosen_tool(self) -> ToolChoice | None:
        """`tool_choice`, or the deprecated `function_call` as the tool_choice it stands for."""
        if isinstance(self.function_call, ChosenFunction):
            return NamedToolChoice(type="function", function=self.function_call)
        return self.tool_choice if self.function_call is None else self.function_call

    @property
    def _tool_fields(self) -> tuple[str, str]:
        """The request's names for its tools and its choice among them, for errors to use."""
        return ("functions", "function_call") if self.legacy_functions else ("tools", "tool_choice")

    @property
    def tool_call_mode(self) -> ToolCallMode | None:
        """How a named function or "required" is called; None: no tools, "none" or "auto"."""
        tools, choice = self.offered_tools, self.chosen_tool
        if not tools or choice in ("none", "auto", None):
            return None
        parameters = {t.function.name: t.function.parameters or ANY_OBJECT for t in tools}
        named = choice.function.name if isinstance(choice, NamedToolChoice) else None
        return ToolCallMode(named, parameters)

    @property
    def auto_tool_choice(self) -> bool:
        """The model decides whether to call its tools: "auto", the default with tools."""
        return bool(self.offered_tools) and self.chosen_tool in ("auto", None)

    def template_options(self, chat_template: str | None) -> TemplateOptions:
        """How its messages are rendered; `chat_template`: its own template, where the server takes it."""
        return TemplateOptions(
            self.template_tools,
            self.opens_turn,
            self.template_kwargs,
            self.continue_final_message,
            self.documents,
            bool(self.add_special_tokens),
            chat_template,
        )

    @property
    def template_tools(self) -> list[dict[str, Any]] | None:
        """The tools for the chat template (none when tool_choice is "none", as vLLM by default)."""
        return None if self.chosen_tool == "none" else template_tools(self.offered_tools)

    @property
    def constraint(self) -> Constraint | None:
        mode = self.tool_call_mode
        if mode is not None:
            return ("json_schema", mode.schema())
        return super().constraint

    @property
    def logprob_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def token_limit(self) -> int | None:
        """Tokens to generate at most; None: up to the context length."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def token_limit_param(self) -> str | None:
        if self.max_completion_tokens is not None:
            return "max_completion_tokens"
        return super().token_limit_param

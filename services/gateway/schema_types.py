"""Field types, validators and the model configuration the API's request bodies share."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo
from pydantic_core import PydanticCustomError

TOKEN_ID_MAX = 2**32 - 1
STRICT = ConfigDict(extra="forbid", strict=True)  # unknown fields refused, no type coercion
MAX_HINT_CHARS = 1024  # safety_identifier, prompt_cache_key, request_id


def _valid_unicode(value: str) -> str:
    """JSON may escape a lone UTF-16 surrogate ("\\ud800"), which a Python str keeps but no UTF-8
    text can: the tokenizer would fail on it (a 500), so it is refused here, where the error names
    the field."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PydanticCustomError(
            "invalid_unicode",
            "the text is not valid Unicode: it holds a lone surrogate ({char} at character {at})",
            {"char": f"\\u{ord(value[exc.start]):04x}", "at": exc.start},
        ) from None
    return value


# Text that reaches the model or is matched against its output (prompts, messages, stop strings).
UnicodeText = Annotated[str, AfterValidator(_valid_unicode)]
TokenId = Annotated[int, Field(ge=0, le=TOKEN_ID_MAX)]
# OpenAI's `metadata` (a request's, a conversation's, a stored chat completion's): 16 pairs at most.
Metadata = Annotated[
    dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]], Field(max_length=16)
]


# The chat template's own arguments, which `chat_template_kwargs` may not set: the gateway sets them.
TEMPLATE_ARGUMENTS = frozenset(
    {
        "conversation",
        "messages",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)


def _free_template_kwargs(value: dict[str, Any]) -> dict[str, Any]:
    taken = sorted(TEMPLATE_ARGUMENTS & value.keys())
    if taken:
        raise PydanticCustomError(
            "reserved_template_kwargs",
            "{names}: set by the server, not by chat_template_kwargs",
            {"names": ", ".join(taken)},
        )
    return value


# vLLM's and SGLang's `chat_template_kwargs`: more variables for the chat template (Qwen3's
# `enable_thinking`, ...); a template ignores those it does not read.
TemplateKwargs = Annotated[dict[str, Any], AfterValidator(_free_template_kwargs)]
MAX_DOCUMENTS = 256
# vLLM's `documents`: each a dict of strings (a "title" and a "text", as the templates that read them
# expect), handed to the chat template as its `documents` argument.
TemplateDocuments = Annotated[list[dict[str, UnicodeText]], Field(max_length=MAX_DOCUMENTS)]


# Values that mean "feature off" for the OpenAI fields treespec does not implement.
NEUTRAL_VALUES: tuple[Any, ...] = (None, False, 0, "", [], {}, "none", "auto", {"type": "text"}, ["text"])


def unsupported(value: Any, info: ValidationInfo) -> Any:
    """A field validator for OpenAI fields treespec does not implement: only their neutral value."""
    if value in NEUTRAL_VALUES:  # == comparison: 0.0 and False count as 0
        return value
    raise PydanticCustomError(
        "unsupported_parameter", "'{name}' is not supported by this server", {"name": info.field_name}
    )


def null_is_default(cls: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """OpenAI reads null as "not given" (clients send it for options they leave unset)."""
    if value is None and info.field_name is not None:
        return cls.model_fields[info.field_name].get_default(call_default_factory=True)
    return value

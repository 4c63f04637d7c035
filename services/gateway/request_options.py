"""The option objects inside a request body (pydantic v2, strict): stream options, per-request
speculation, OpenAI's response_format, and the reasoning efforts OpenAI names."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from treespec.gateway.schema_types import STRICT, null_is_default

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]  # OpenAI's values


class StreamOptions(BaseModel):
    model_config = STRICT
    include_usage: bool = False
    # vLLM's: with include_usage, every chunk carries its choice's usage so far too.
    continuous_usage_stats: bool = False
    # OpenAI's: accepted; no event carries an `obfuscation` field (service_hints.py).
    include_obfuscation: bool = True

    _defaults_for_null = field_validator(
        "include_usage", "continuous_usage_stats", "include_obfuscation", mode="before"
    )(null_is_default)


class SpeculationOptions(BaseModel):
    """Per-request speculation settings (SGLang's names); absent fields take the verifier's."""

    model_config = STRICT
    enabled: bool | None = None
    num_steps: int | None = Field(default=None, ge=1, le=64)
    eagle_topk: int | None = Field(default=None, ge=1, le=64)
    num_draft_tokens: int | None = Field(default=None, ge=1, le=1024)


class JsonSchemaFormat(BaseModel):
    """OpenAI's `response_format.json_schema`: a name, and the schema the output must follow."""

    model_config = STRICT
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = STRICT
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise PydanticCustomError(
                "missing", "'response_format.json_schema' is required when its type is 'json_schema'"
            )
        if self.type != "json_schema" and self.json_schema is not None:
            raise PydanticCustomError(
                "invalid_value", "'response_format.json_schema' is only allowed with type 'json_schema'"
            )
        return self

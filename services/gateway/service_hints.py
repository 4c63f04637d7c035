"""OpenAI's newer request fields that steer its own service rather than the model's output: prompt-cache
hints, stream obfuscation, and the reply's verbosity. Clients written for the current OpenAI API send
them (the openai SDK has typed parameters for each), and refusing them as unknown turned such a client
away for what changes nothing here.

- Prompt caching (`prompt_cache_retention`, `prompt_cache_options`, and a content part's
  `prompt_cache_breakpoint`): accepted and ignored. This server caches every prompt's prefix by
  itself, block by block, and keeps it until the KV pool needs the room (`cache_salt` keeps tenants
  apart); no breakpoint or lifetime is needed, and none is promised. `prewarm` (caching a prompt
  without generating) is not implemented: true is refused.
- `stream_options.include_obfuscation`: accepted; the streams carry no `obfuscation` field (OpenAI
  pads its events with one against length side channels on the network; put TLS in front of this
  server where that matters).
- `verbosity`: only OpenAI's default, "medium" (the model writes as its weights make it: no
  instruction is added for it); "low" and "high" are refused as unsupported.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from treespec.gateway.schema_types import MAX_HINT_CHARS, STRICT

PromptCacheRetention = Literal["in_memory", "24h"]
CacheTtl = Literal["30m", "12h"]
Verbosity = Literal["low", "medium", "high"]
DEFAULT_VERBOSITY = "medium"


class PromptCacheBreakpoint(BaseModel):
    """A content part's mark of where a reusable prefix ends (OpenAI's explicit caching)."""

    model_config = STRICT
    mode: Literal["explicit"]
    ttl: CacheTtl | None = None


class PromptCacheOptions(BaseModel):
    """OpenAI's `prompt_cache_options` (chat completions and the Responses API)."""

    model_config = STRICT
    mode: Literal["implicit", "explicit"] | None = None
    ttl: CacheTtl | None = None
    prewarm: bool | None = None
    comparison_response_id: str | None = Field(default=None, max_length=MAX_HINT_CHARS)

    @field_validator("prewarm")
    @classmethod
    def _no_prewarm(cls, value: bool | None) -> bool | None:
        if value:
            raise PydanticCustomError(
                "unsupported_parameter", "'prompt_cache_options.prewarm' is not supported by this server"
            )
        return value


def default_verbosity_only(value: Verbosity | None, info: ValidationInfo) -> Verbosity | None:
    """A field validator for `verbosity`: null or OpenAI's default only."""
    if value is None or value == DEFAULT_VERBOSITY:
        return value
    raise PydanticCustomError(
        "unsupported_parameter",
        "'{name}' other than '{default}' is not supported by this server (got '{value}')",
        {"name": info.field_name, "default": DEFAULT_VERBOSITY, "value": value},
    )


def absent_only(value: Any, info: ValidationInfo) -> Any:
    """A field validator for an OpenAI field whose mere presence asks for what this server lacks (an
    empty `web_search_options` asks for a web search): null only."""
    if value is None:
        return value
    raise PydanticCustomError(
        "unsupported_parameter", "'{name}' is not supported by this server", {"name": info.field_name}
    )

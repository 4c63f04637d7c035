"""vLLM's and SGLang's request fields that name what the gateway has under another name, or switch
what it does one way only; both endpoints take them, so that a client written for either server runs
here unchanged (an unknown field is refused, as OpenAI refuses it).

SGLang's names for vLLM's fields: `rid` is `request_id` (it names the response), `no_stop_trim` is
`include_stop_str_in_output`; a request that gives both names of one field gives them alike.
(SGLang's `regex`, `ebnf` and `json_schema` are structured output: structured_outputs.py.)

vLLM's switches: `use_beam_search` is taken false only and `length_penalty`, which weighs beam
search's beams, at 1 only (beam search is not served); `spaces_between_special_tokens` either way:
the gateway decodes with the tokenizers library's fast tokenizers, whose decoding does not read it
(vLLM's fast path does not either), so the text is the same.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from treespec.gateway.schema_types import MAX_HINT_CHARS, STRICT, UnicodeText, null_is_default, unsupported


class VendorFields(BaseModel):
    model_config = STRICT
    rid: UnicodeText | None = Field(default=None, min_length=1, max_length=MAX_HINT_CHARS)  # SGLang's
    no_stop_trim: bool = False  # SGLang's
    use_beam_search: bool = False  # vLLM's
    length_penalty: float = 1.0  # vLLM's
    spaces_between_special_tokens: bool = True  # vLLM's

    _vendor_defaults_for_null = field_validator(
        "no_stop_trim", "use_beam_search", "length_penalty", "spaces_between_special_tokens", mode="before"
    )(null_is_default)
    _check_beam_search = field_validator("use_beam_search")(unsupported)

    @field_validator("length_penalty")
    @classmethod
    def _no_beams_to_weigh(cls, value: float, info: ValidationInfo) -> float:
        if value != 1.0:
            raise PydanticCustomError(
                "unsupported_parameter",
                "'{name}' other than 1 is not supported by this server (it weighs beam search's beams)",
                {"name": info.field_name},
            )
        return value

    @staticmethod
    def one_value(field: str, vendor_field: str, value: Any, vendor_value: Any, unset: Any) -> Any:
        """A field given under vLLM's name and SGLang's: the value it has (`unset` where neither
        name gave one); the names must agree where both did."""
        if vendor_value == unset:
            return value
        if value not in (unset, vendor_value):
            raise PydanticCustomError(
                "invalid_value",
                "'{field}' and '{vendor_field}' name the same thing and differ; give one of them",
                {"field": field, "vendor_field": vendor_field},
            )
        return vendor_value

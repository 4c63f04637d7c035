"""vLLM's `structured_outputs` object (vLLM 0.10.2 on; it replaces the `guided_*` fields): one of
`json` (a schema, as a dict or its JSON text), `regex`, `choice`, `grammar` (EBNF) or `json_object`.
Its switches for vLLM's own backends are accepted at their defaults only."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from treespec.gateway.schema_types import STRICT, UnicodeText, unsupported

# What the output must match: (kind, value), kind a field of the wire's OutputConstraint.
Constraint = tuple[Literal["json_schema", "json_object", "regex", "choice", "grammar"], Any]
MAX_GUIDED_CHOICES = 256  # choices of guided_choice or structured_outputs.choice at most


class StructuredOutputs(BaseModel):
    model_config = STRICT
    json_: dict[str, Any] | UnicodeText | None = Field(default=None, alias="json")
    regex: UnicodeText | None = Field(default=None, min_length=1)
    choice: list[UnicodeText] | None = Field(default=None, min_length=1, max_length=MAX_GUIDED_CHOICES)
    grammar: UnicodeText | None = Field(default=None, min_length=1)
    json_object: bool | None = None
    # vLLM's backend switches: only their defaults.
    disable_fallback: bool | None = None
    disable_any_whitespace: bool | None = None
    disable_additional_properties: bool | None = None
    whitespace_pattern: str | None = None
    structural_tag: str | None = None

    _check_unsupported = field_validator(
        "disable_fallback",
        "disable_any_whitespace",
        "disable_additional_properties",
        "whitespace_pattern",
        "structural_tag",
    )(unsupported)

    @model_validator(mode="after")
    def _exactly_one(self) -> StructuredOutputs:
        kinds = self._kinds()
        if len(kinds) != 1:
            raise PydanticCustomError(
                "invalid_value",
                "structured_outputs needs exactly one of 'json', 'regex', 'choice', 'grammar' or "
                "'json_object' (got {count})",
                {"count": len(kinds)},
            )
        if self.choice is not None and not all(self.choice):
            raise PydanticCustomError("invalid_value", "'choice' must not hold an empty string")
        return self

    def _kinds(self) -> list[Constraint]:
        given: list[Constraint] = []
        if self.json_ is not None:
            given.append(("json_schema", self.json_))
        if self.regex is not None:
            given.append(("regex", self.regex))
        if self.choice is not None:
            given.append(("choice", self.choice))
        if self.grammar is not None:
            given.append(("grammar", self.grammar))
        if self.json_object:
            given.append(("json_object", True))
        return given

    @property
    def constraint(self) -> Constraint:
        return self._kinds()[0]

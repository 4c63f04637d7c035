"""Structured output's request fields: OpenAI's `response_format` (json_object, json_schema), vLLM's
`guided_json`, `guided_regex`, `guided_choice` and `guided_grammar`, and vLLM's `structured_outputs`
object (vLLM 0.10.2 on; it replaces the guided fields): one of `json` (a schema, as a dict or its JSON
text), `regex`, `choice`, `grammar` (EBNF) or `json_object`, its switches for vLLM's own backends at
their defaults only; SGLang's names for the same: `regex`, `ebnf` and `json_schema` (its completions'
field, taken on both endpoints). vLLM's `guided_decoding_backend` may name any of vLLM's backends:
the verifier's own grammar engine (services/verifier/grammar) holds the output to the same language
whichever is named; `guided_whitespace_pattern`, a switch of vLLM's outlines backend, is taken at its
default (null) only. A request gives one constraint at most."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from treespec.gateway.errors import quotable
from treespec.gateway.request_options import ResponseFormat
from treespec.gateway.schema_types import STRICT, UnicodeText, unsupported

# What the output must match: (kind, value), kind a field of the wire's OutputConstraint.
ConstraintKind = Literal["json_schema", "json_object", "regex", "choice", "grammar"]
Constraint = tuple[ConstraintKind, Any]
MAX_GUIDED_CHOICES = 256  # choices of guided_choice or structured_outputs.choice at most
# The fields that hold a constraint of one kind each: vLLM's, then SGLang's names for the same.
_FIELD_KINDS: tuple[tuple[str, ConstraintKind], ...] = (
    ("guided_json", "json_schema"),
    ("guided_regex", "regex"),
    ("guided_choice", "choice"),
    ("guided_grammar", "grammar"),
    ("regex", "regex"),
    ("ebnf", "grammar"),
    ("json_schema", "json_schema"),
)
# vLLM's structured-output backends, any of which a request may name (vLLM's "auto" picks one).
GUIDED_DECODING_BACKENDS = ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer")


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


class ConstraintFields(BaseModel):
    """The structured-output fields of both endpoints (SamplingFields), one at most."""

    model_config = STRICT
    response_format: ResponseFormat | None = None
    guided_json: dict[str, Any] | UnicodeText | None = None
    guided_regex: UnicodeText | None = Field(default=None, min_length=1)
    guided_choice: list[UnicodeText] | None = Field(default=None, min_length=1, max_length=MAX_GUIDED_CHOICES)
    guided_grammar: UnicodeText | None = Field(default=None, min_length=1)
    structured_outputs: StructuredOutputs | None = None  # vLLM's newer form of the guided fields
    # SGLang's names: guided_regex, guided_grammar (EBNF) and guided_json.
    regex: UnicodeText | None = Field(default=None, min_length=1)
    ebnf: UnicodeText | None = Field(default=None, min_length=1)
    json_schema: dict[str, Any] | UnicodeText | None = None
    guided_decoding_backend: str | None = None  # vLLM's: any of GUIDED_DECODING_BACKENDS
    guided_whitespace_pattern: str | None = None  # vLLM's outlines switch: its default only

    _check_backend_switches = field_validator("guided_whitespace_pattern")(unsupported)

    @field_validator("guided_decoding_backend")
    @classmethod
    def _known_backend(cls, value: str | None) -> str | None:
        if value is not None and value not in GUIDED_DECODING_BACKENDS:
            known = ", ".join(repr(b) for b in GUIDED_DECODING_BACKENDS)
            raise PydanticCustomError(
                "invalid_value",
                "'guided_decoding_backend' must be one of {known} (each is served by this server's own"
                " grammar engine); got '{value}'",
                {"known": known, "value": quotable(value)},
            )
        return value

    @model_validator(mode="after")
    def _one_constraint(self) -> ConstraintFields:
        given = [name for name, _ in self._constraints()]
        if len(given) > 1:
            raise PydanticCustomError(
                "invalid_value",
                "only one of {names} may be given",
                {"names": ", ".join(f"'{n}'" for n in given)},
            )
        if self.guided_choice is not None and not all(self.guided_choice):
            raise PydanticCustomError("invalid_value", "'guided_choice' must not hold an empty string")
        return self

    def _constraints(self) -> list[tuple[str, Constraint]]:
        """(field name, constraint) for each structured-output field that asks for one."""
        found: list[tuple[str, Constraint]] = []
        fmt = self.response_format
        if fmt is not None and fmt.json_schema is not None:
            schema = fmt.json_schema.schema_
            found.append(
                ("response_format", ("json_object", True) if schema is None else ("json_schema", schema))
            )
        elif fmt is not None and fmt.type == "json_object":
            found.append(("response_format", ("json_object", True)))
        for name, kind in _FIELD_KINDS:
            value = getattr(self, name)
            if value is not None:
                found.append((name, (kind, value)))
        if self.structured_outputs is not None:
            found.append(("structured_outputs", self.structured_outputs.constraint))
        return found

    @property
    def constraint(self) -> Constraint | None:
        """What the output must match (structured output); None: free text."""
        found = self._constraints()
        return found[0][1] if found else None

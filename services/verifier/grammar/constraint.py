"""What a request's output must match (structured output), as the engine takes it: OpenAI's
`response_format` and vLLM's guided decoding arrive here as one of five kinds."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ConstraintKind(enum.Enum):
    JSON_OBJECT = "json_object"  # any JSON object
    JSON_SCHEMA = "json_schema"  # `spec`: a JSON Schema, as JSON text
    REGEX = "regex"  # `spec`: a regular expression the whole output matches
    CHOICE = "choice"  # `choices`: exactly one of these strings
    GRAMMAR = "grammar"  # `spec`: an EBNF grammar (xgrammar's dialect) with a rule `root`


@dataclass(frozen=True)
class OutputConstraint:
    kind: ConstraintKind
    spec: str = ""
    choices: tuple[str, ...] = ()
    # A thinking model's end of reasoning (`</think>`): the grammar holds from the end of its first
    # occurrence in the output, any text before it. Empty: from the first token.
    starts_after: str = ""

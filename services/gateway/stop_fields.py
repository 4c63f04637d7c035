"""The request's stops: OpenAI's `stop` strings (up to MAX_STOP_STRINGS: OpenAI takes 4, vLLM and
SGLang any number) and SGLang's `stop_regex` patterns; stop_strings.py applies both to the text."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, field_validator

from treespec.gateway.schema_types import STRICT, UnicodeText
from treespec.gateway.stop_strings import stop_pattern_problem

MAX_STOP_STRINGS = 64  # OpenAI takes 4; vLLM and SGLang take any number (clients send more than 4)

StopList = Annotated[list[UnicodeText], Field(max_length=MAX_STOP_STRINGS)]


def _listed(value: str | list[str] | None) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value or ())


class StopFields(BaseModel):
    model_config = STRICT
    stop: UnicodeText | StopList | None = None
    stop_regex: UnicodeText | StopList | None = None  # SGLang's: patterns that stop as stop strings do

    @field_validator("stop_regex")
    @classmethod
    def _stop_patterns_compile(cls, value: str | list[str] | None) -> str | list[str] | None:
        for pattern in _listed(value):
            problem = stop_pattern_problem(pattern)
            if problem is not None:
                raise ValueError(problem)
        return value

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return tuple(s for s in _listed(self.stop) if s)

    @property
    def stop_patterns(self) -> tuple[str, ...]:
        """SGLang's stop regexes."""
        return _listed(self.stop_regex)

"""What a tool-call parser is: it reads the calls a model writes in its own format out of its text.

A chat template shows a model its tools, and a model trained for function calling answers with calls
in its own markup (Hermes' `<tool_call>{...}</tool_call>`, Llama 3's bare JSON...). With tool_choice
"auto" the output is free text, so the gateway reads it with the parser named by `--tool-call-parser`,
as vLLM and SGLang do: the text around the calls stays the message's content. A reader takes a choice's
text piece by piece as it is generated (the stream) or all at once (the whole reply), and returns what
is settled: plain text, or a call. Markup that does not hold a well-formed call stays text.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from treespec.gateway.tool_schemas import ToolDef


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it


Piece = str | ParsedCall  # settled text, or a call


class ToolCallReader(ABC):
    """One choice's text, read as it arrives."""

    @abstractmethod
    def feed(self, text: str) -> list[Piece]:
        """The pieces `text` settles (text that may still open a call is held back)."""

    @abstractmethod
    def finish(self) -> list[Piece]:
        """The rest, once the choice has ended."""


class ToolCallParser(ABC):
    name: ClassVar[str]
    # Its markers are special tokens ([TOOL_CALLS]...): a reply it reads keeps them in its text
    # (skip_special_tokens off for that request, as vLLM sets it for such parsers).
    keeps_special_tokens: ClassVar[bool] = False

    def __init__(self, tools: Sequence[ToolDef] = ()) -> None:
        # The request's tools: a format that writes arguments as text reads them by their schemas.
        self.tools = tuple(tools)

    @abstractmethod
    def reader(self) -> ToolCallReader:
        """A reader for one choice."""

    def parse(self, text: str) -> list[Piece]:
        """A whole reply's pieces."""
        reader = self.reader()
        return reader.feed(text) + reader.finish()


def call_from_json(value: Any) -> ParsedCall | None:
    """A call from its JSON form: {"name": ..., "arguments" or "parameters": {...}}; None if it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as JSON text already
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def calls_from_json_text(text: str) -> list[ParsedCall] | None:
    """The calls `text` is whole: one JSON value, a list of calls (or one call), and nothing after it;
    None when it is not (Mistral before v11, Granite, Phi-4-mini)."""
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        return None
    if text[end:].strip():
        return None
    calls = [call_from_json(v) for v in (value if isinstance(value, list) else [value])]
    return None if not calls or any(c is None for c in calls) else [c for c in calls if c is not None]

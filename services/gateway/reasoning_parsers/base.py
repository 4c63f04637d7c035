"""What a reasoning parser is: it splits a thinking model's output into its reasoning and its answer.

Models such as DeepSeek-R1 and Qwen3 think first, between `<think>` and `</think>`, then answer. With
`--reasoning-parser` the gateway returns the thinking as the message's `reasoning_content` and the rest
as its `content` (streamed: `delta.reasoning_content`, then `delta.content`), as vLLM and SGLang do;
tool calls are read from the answer alone. A reader takes a choice's text piece by piece and returns
what is settled, each part marked reasoning or content.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal


@dataclass(frozen=True)
class Part:
    kind: Literal["reasoning", "content"]
    text: str


class ReasoningReader(ABC):
    """One choice's text, read as it arrives."""

    @abstractmethod
    def feed(self, text: str) -> list[Part]:
        """The parts `text` settles (a marker being written is held back)."""

    @abstractmethod
    def finish(self) -> list[Part]:
        """The rest, once the choice has ended."""


class ReasoningParser(ABC):
    name: ClassVar[str]
    end_marker: ClassVar[str]  # where the reasoning ends and the answer starts
    # Its markers are special tokens ([THINK]): a reply it reads keeps them in its text.
    keeps_special_tokens: ClassVar[bool] = False

    def grammar_starts_after(self, prompt_tail: str) -> str | None:
        """Structured output holds on the answer alone: the grammar starts after `end_marker` in the
        output, or at once (None) when the prompt has closed the reasoning already (a chat template
        with thinking turned off, as Qwen3's with enable_thinking false)."""
        return None if prompt_tail.rstrip().endswith(self.end_marker) else self.end_marker

    @abstractmethod
    def reader(self) -> ReasoningReader:
        """A reader for one choice."""

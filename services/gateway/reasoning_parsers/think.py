"""`<think>...</think>` reasoning, as DeepSeek-R1, Qwen3 and GLM-4.5 write it, Mistral's
`[THINK]...[/THINK]` (Magistral, Ministral reasoning models), and Granite's plain-text markers.

deepseek_r1: the output is reasoning until `</think>` (its chat template may already have opened
`<think>` in the prompt, so the output need not hold it); an output without `</think>` is all
reasoning. qwen3 (and mistral, with its markers): only an output that opens with its start marker
reasons (Qwen3 without thinking answers at once); one left open by the token limit stays reasoning.
The answer's leading whitespace after the end marker goes.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from treespec.gateway.reasoning_parsers.base import Part, ReasoningParser, ReasoningReader
from treespec.gateway.text_markers import held_back

START = "<think>"
END = "</think>"


class ThinkParser(ReasoningParser):
    """Reasoning between a start and an end marker (any of their spellings)."""

    start_markers: ClassVar[tuple[str, ...]] = (START,)
    end_markers: ClassVar[tuple[str, ...]] = (END,)
    end_marker = END  # where a grammar starts: each of end_markers ends with it
    reasons_without_start: ClassVar[bool]  # an output not opening with a start marker reasons still

    def reader(self) -> ReasoningReader:
        return ThinkReader(self.start_markers, self.end_markers, self.reasons_without_start)


class DeepSeekR1Parser(ThinkParser):
    name = "deepseek_r1"
    reasons_without_start = True


class Qwen3Parser(ThinkParser):
    name = "qwen3"
    reasons_without_start = False


class MistralParser(ThinkParser):
    """Magistral and Ministral's reasoning models: [THINK]...[/THINK], special tokens (kept in the text
    this parser reads, as vLLM reads it); an output that does not open with [THINK] is the answer."""

    name = "mistral"
    start_markers = ("[THINK]",)
    end_markers = ("[/THINK]",)
    end_marker = "[/THINK]"
    reasons_without_start = False
    keeps_special_tokens = True


class GraniteParser(ThinkParser):
    """IBM Granite 3.2+ with thinking on: plain text markers, "Here is my thought process:" then "Here
    is my response:" ("Here's" too, as vLLM reads them); an output that does not open with the first
    is the answer."""

    name = "granite"
    start_markers = ("Here is my thought process:", "Here's my thought process:")
    end_markers = ("Here is my response:", "Here's my response:")
    end_marker = "my response:"
    reasons_without_start = False


class DeepSeekV3Parser(DeepSeekR1Parser):
    """DeepSeek V3.1 and later (hybrid): R1's reading; with thinking off, the template closes the
    thinking in the prompt, and the whole output is the answer (chat_start.py)."""

    name = "deepseek_v3"


class Qwen3ThinkingParser(DeepSeekR1Parser):
    """Qwen3's thinking-only models (-Thinking-2507): their template opens <think> in the prompt."""

    name = "qwen3_thinking"


class Glm45Parser(Qwen3Parser):
    """GLM-4.5 and 4.6: Qwen3's reading (thinking off: no <think> at all)."""

    name = "glm45"


class ThinkReader(ReasoningReader):
    def __init__(self, starts: tuple[str, ...], ends: tuple[str, ...], reasons_without_start: bool) -> None:
        self.starts, self.ends = starts, ends
        self.reasons_without_start = reasons_without_start
        self._state: Literal["opening", "reasoning", "answer"] = "opening"
        self._pending = ""
        self._answer_started = False

    def feed(self, text: str) -> list[Part]:
        self._pending += text
        return self._settle(final=False)

    def finish(self) -> list[Part]:
        return self._settle(final=True)

    def _settle(self, final: bool) -> list[Part]:
        parts: list[Part] = []
        if self._state == "opening" and not self._open(final):
            return parts
        if self._state == "reasoning":
            found = [(at, marker) for marker in self.ends if (at := self._pending.find(marker)) >= 0]
            if not found:
                keep = 0 if final else max(held_back(self._pending, marker) for marker in self.ends)
                parts.append(Part("reasoning", self._pending[: len(self._pending) - keep]))
                self._pending = self._pending[len(self._pending) - keep :]
            else:
                end, marker = min(found)
                parts.append(Part("reasoning", self._pending[:end]))
                self._pending = self._pending[end + len(marker) :]
                self._state = "answer"
        if self._state == "answer":
            if not self._answer_started:
                self._pending = self._pending.lstrip()
                self._answer_started = bool(self._pending)
            parts.append(Part("content", self._pending))
            self._pending = ""
        return [p for p in parts if p.text]

    def _open(self, final: bool) -> bool:
        """Whether the output's opening is known: the start marker (dropped), or something else."""
        head = self._pending.lstrip()
        if not final and any(marker.startswith(head) for marker in self.starts):
            return False  # nothing yet, or a start marker being written
        start = next((marker for marker in self.starts if head.startswith(marker)), None)
        if start is not None:
            self._pending = head[len(start) :]
            self._state = "reasoning"
        else:
            self._state = "reasoning" if self.reasons_without_start else "answer"
            self._answer_started = not self.reasons_without_start
        return True

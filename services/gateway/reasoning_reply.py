"""What a chat request asks of a thinking model's reasoning in its reply (with `--reasoning-parser`).

By default the reasoning comes back as `reasoning_content`, streamed as it is written (reasoning
parsers: reasoning_parsers/base.py). vLLM's `include_reasoning: false` leaves it out of the reply;
SGLang's `separate_reasoning: false` leaves it in the content, as the model wrote it (markers
included, no parser reads it), and its `stream_reasoning: false` holds the reasoning back in a stream
until the answer starts (or the choice ends), then sends it in one delta. A reply whole is the same
with either value of `stream_reasoning`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, field_validator

from treespec.gateway.reasoning_parsers.base import Part, ReasoningParser, ReasoningReader
from treespec.gateway.schema_types import STRICT, null_is_default


@dataclass(frozen=True)
class ReasoningReply:
    include: bool = True  # vLLM's include_reasoning
    stream: bool = True  # SGLang's stream_reasoning

    def reader(self, parser: ReasoningParser) -> ReasoningReader:
        """A reader for one choice that gives back its reasoning as asked."""
        reader = parser.reader()
        return reader if self.include and self.stream else _ShapedReader(reader, self)


class ReasoningFields(BaseModel):
    """The chat request's fields for it."""

    model_config = STRICT
    include_reasoning: bool = True  # vLLM's
    separate_reasoning: bool = True  # SGLang's
    stream_reasoning: bool = True  # SGLang's

    _reasoning_defaults_for_null = field_validator(
        "include_reasoning", "separate_reasoning", "stream_reasoning", mode="before"
    )(null_is_default)

    def reply_parser(self, parser: ReasoningParser | None) -> ReasoningParser | None:
        """The parser the reply is read with: none where the reasoning stays in the content."""
        return parser if self.separate_reasoning else None

    @property
    def reasoning_reply(self) -> ReasoningReply:
        return ReasoningReply(self.include_reasoning, self.stream_reasoning)


@dataclass
class _ShapedReader(ReasoningReader):
    inner: ReasoningReader
    shape: ReasoningReply
    _held: list[str] = field(default_factory=list)  # reasoning not sent yet (stream_reasoning false)

    def feed(self, text: str) -> list[Part]:
        return self._shaped(self.inner.feed(text), ended=False)

    def finish(self) -> list[Part]:
        return self._shaped(self.inner.finish(), ended=True)

    def _shaped(self, parts: list[Part], ended: bool) -> list[Part]:
        out: list[Part] = []
        for part in parts:
            if part.kind == "content":
                out += self._release()
                out.append(part)
            elif self.shape.include:  # and not streamed
                self._held.append(part.text)
        return out + self._release() if ended else out

    def _release(self) -> list[Part]:
        if not self._held:
            return []
        text = "".join(self._held)
        self._held.clear()
        return [Part("reasoning", text)]

"""Reasoning parsers, by the names `--reasoning-parser` takes."""

from __future__ import annotations

from treespec.gateway.reasoning_parsers.base import ReasoningParser
from treespec.gateway.reasoning_parsers.think import DeepSeekR1Parser, Qwen3Parser

REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    parser.name: parser for parser in (DeepSeekR1Parser, Qwen3Parser)
}

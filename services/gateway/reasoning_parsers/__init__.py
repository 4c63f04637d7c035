"""Reasoning parsers, by the names `--reasoning-parser` takes (SGLang's spellings too: ALIASES)."""

from __future__ import annotations

from treespec.gateway.reasoning_parsers.base import ReasoningParser
from treespec.gateway.reasoning_parsers.think import (
    DeepSeekR1Parser,
    DeepSeekV3Parser,
    Glm45Parser,
    GraniteParser,
    MistralParser,
    Qwen3Parser,
    Qwen3ThinkingParser,
)

REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    parser.name: parser
    for parser in (
        DeepSeekR1Parser,
        DeepSeekV3Parser,
        Qwen3Parser,
        Qwen3ThinkingParser,
        Glm45Parser,
        MistralParser,
        GraniteParser,
    )
}
ALIASES = {"deepseek-r1": "deepseek_r1", "deepseek-v3": "deepseek_v3", "qwen3-thinking": "qwen3_thinking"}

"""Tool-call parsers for tool_choice "auto", by the names `--tool-call-parser` takes (vLLM's; SGLang's
names for the same formats too: ALIASES)."""

from __future__ import annotations

from treespec.gateway.tool_parsers.base import ToolCallParser
from treespec.gateway.tool_parsers.deepseek import DeepSeekV3Parser, DeepSeekV31Parser
from treespec.gateway.tool_parsers.glm45 import Glm45Parser
from treespec.gateway.tool_parsers.granite import GraniteParser
from treespec.gateway.tool_parsers.hermes import HermesParser
from treespec.gateway.tool_parsers.kimi_k2 import KimiK2Parser
from treespec.gateway.tool_parsers.llama3_json import Llama3JsonParser
from treespec.gateway.tool_parsers.mistral import MistralParser
from treespec.gateway.tool_parsers.phi4_mini import Phi4MiniJsonParser
from treespec.gateway.tool_parsers.pythonic import PythonicParser
from treespec.gateway.tool_parsers.qwen3_coder import Qwen3CoderParser

TOOL_CALL_PARSERS: dict[str, type[ToolCallParser]] = {
    parser.name: parser
    for parser in (
        HermesParser,
        Llama3JsonParser,
        MistralParser,
        PythonicParser,
        Qwen3CoderParser,
        DeepSeekV3Parser,
        DeepSeekV31Parser,
        Glm45Parser,
        KimiK2Parser,
        GraniteParser,
        Phi4MiniJsonParser,
    )
}
ALIASES = {
    "qwen25": "hermes",
    "llama3": "llama3_json",
    "deepseekv3": "deepseek_v3",
    "deepseekv31": "deepseek_v31",
}

"""What the routes share, kept on `app.state.gateway` (no globals): built by the app's lifespan."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from fastapi import Request
from opentelemetry.trace import Tracer

from treespec.gateway.auto_tool_calls import AutoToolCalls
from treespec.gateway.batch_api.files import FileStore
from treespec.gateway.batch_api.jobs import BatchJobs
from treespec.gateway.chat_store.store import ChatStore
from treespec.gateway.config import GatewayConfig
from treespec.gateway.errors import APIError
from treespec.gateway.metrics import GatewayMetrics
from treespec.gateway.native.aborts import AbortRegistry
from treespec.gateway.reasoning_parsers import REASONING_PARSERS
from treespec.gateway.reasoning_parsers.base import ReasoningParser
from treespec.gateway.request_log import RequestLog
from treespec.gateway.responses_api.background import BackgroundResponses
from treespec.gateway.responses_api.conversation_store import ConversationStore
from treespec.gateway.responses_api.store import ResponseStore
from treespec.gateway.tokenizer import PromptTokenizer
from treespec.gateway.tool_parsers import TOOL_CALL_PARSERS
from treespec.gateway.tool_schemas import ToolDef
from treespec.gateway.verifier_client import VerifierClient


@dataclass(frozen=True)
class GatewayState:
    config: GatewayConfig
    tokenizer: PromptTokenizer
    verifier: VerifierClient
    metrics: GatewayMetrics
    tracer: Tracer
    responses: ResponseStore  # the stored Responses API responses
    background: BackgroundResponses  # those being made in the background
    conversations: ConversationStore  # the Conversations API's
    batches: BatchJobs  # the Batch API's, and the files they read and write (`batches.files`)
    chats: ChatStore  # the stored chat completions (`store: true`)
    # When the gateway started: the model's `created`, the same in every answer.
    started: int = field(default_factory=lambda: int(time.time()))
    aborts: AbortRegistry = field(default_factory=AbortRegistry)  # SGLang's /abort_request, by rid
    request_log: RequestLog | None = None  # a line per request (--enable-log-requests)

    @property
    def files(self) -> FileStore:
        return self.batches.files

    def check_model(self, model: str) -> None:
        if model not in self.config.model_names:
            raise APIError(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
                param="model",
            )

    def reasoning_parser(self) -> ReasoningParser | None:
        """The thinking models' reasoning parser (--reasoning-parser), or None."""
        name = self.config.reasoning_parser
        return REASONING_PARSERS[name]() if name is not None else None

    def tool_markers_are_special_tokens(self) -> bool:
        """Whether the tool-call parser's markers are special tokens, kept in the text it reads."""
        name = self.config.tool_call_parser
        return name is not None and TOOL_CALL_PARSERS[name].keeps_special_tokens

    def reasoning_markers_are_special_tokens(self) -> bool:
        """Whether the reasoning parser's markers are special tokens, kept in the text it reads."""
        name = self.config.reasoning_parser
        return name is not None and REASONING_PARSERS[name].keeps_special_tokens

    def auto_tool_calls(self, tools: Sequence[ToolDef], legacy: bool = False) -> AutoToolCalls:
        """tool_choice "auto" over `tools` read with the model's tool-call parser; a 400 when none was
        configured, worded in the fields the request used (`legacy`: the deprecated
        functions/function_call)."""
        if self.config.tool_call_parser is None:
            choice, offered, instead = (
                ("function_call", "functions", "name a function")
                if legacy
                else ("tool_choice", "tools", "set tool_choice to 'required' or name a function")
            )
            raise APIError(
                400,
                f"{choice} 'auto' (the default with {offered}) needs a tool-call parser for the model's"
                f" own format, and this server was started without one (--tool-call-parser); {instead}",
                code="unsupported_parameter",
                param=choice,
            )
        return AutoToolCalls(TOOL_CALL_PARSERS[self.config.tool_call_parser](tools))


def gateway_state(request: Request) -> GatewayState:
    """FastAPI dependency: the app's shared state."""
    state: GatewayState = request.app.state.gateway
    return state

"""A chat request started: its tools and reasoning parser chosen, the chat template applied, its
generation planned. The chat completions and the Responses API routes start their requests alike."""

from __future__ import annotations

import asyncio

from treespec.gateway.chat_messages import template_messages
from treespec.gateway.chat_reply import ChatReplies
from treespec.gateway.chat_template import request_template
from treespec.gateway.errors import APIError
from treespec.gateway.function_calls import FunctionCalls
from treespec.gateway.reasoning_parsers.base import ReasoningParser
from treespec.gateway.run import GenerationRun
from treespec.gateway.schemas import ChatCompletionRequest
from treespec.gateway.state import GatewayState
from treespec.gateway.tool_calls import ToolCalling
from treespec.shared.rpc.limits import MAX_PREDICTION_TOKENS

PROMPT_TAIL_TOKENS = 16  # the prompt's last tokens, read for a reasoning end the template wrote


async def start_chat(
    state: GatewayState,
    body: ChatCompletionRequest,
    id_prefix: str,
    prompt_param: str = "messages",
    limit_param: str | None = None,
) -> tuple[GenerationRun, ChatReplies]:
    """The request's generation (nothing sent yet) and how its text becomes replies; `prompt_param`
    and `limit_param`: the request's fields that a prompt error and a token limit error point at
    (None: the chat field that holds the limit)."""
    tools = _tool_calling(state, body)
    markers = body.auto_tool_choice and state.tool_markers_are_special_tokens()
    if markers or state.reasoning_markers_are_special_tokens():
        body = body.model_copy(update={"skip_special_tokens": False})  # the parsers read their markers
    prompt = await chat_prompt(state, body)
    reasoning, grammar_after = _reasoning(state, body, prompt)
    prediction = await _prediction(state, body)
    run = await GenerationRun.start(
        state,
        body,
        [prompt],
        body.token_limit,
        "chat",
        id_prefix,
        grammar_after=grammar_after,
        prompt_param=prompt_param,
        prediction=prediction,
        limit_param=limit_param,
    )
    return run, ChatReplies(body.reply_parser(reasoning), tools, body.reasoning_reply)


async def chat_prompt(state: GatewayState, body: ChatCompletionRequest) -> list[int]:
    """The request's prompt: its messages through the chat template (the server's, or the request's
    own where the server trusts them)."""
    messages = template_messages(body.messages)
    template = request_template(body.chat_template, state.config.trust_request_chat_template)
    return await asyncio.to_thread(state.tokenizer.chat_prompt, messages, body.template_options(template))


async def _prediction(state: GatewayState, body: ChatCompletionRequest) -> list[int]:
    """The predicted output's tokens (none without one)."""
    if body.prediction is None:
        return []
    tokens = await asyncio.to_thread(state.tokenizer.text_prompt, body.prediction.text, False)
    if len(tokens) > MAX_PREDICTION_TOKENS:
        message = f"The prediction has {len(tokens)} tokens; at most {MAX_PREDICTION_TOKENS} are taken."
        raise APIError(400, message, code="invalid_value", param="prediction")
    return tokens


def _tool_calling(state: GatewayState, body: ChatCompletionRequest) -> ToolCalling | None:
    """How the request's tools are called: "auto" with the model's parser, a named function or
    "required" as structured output, or not at all; for the deprecated `functions`, the same calls
    go back in the legacy shape."""
    if body.auto_tool_choice:
        tools: ToolCalling | None = state.auto_tool_calls(body.offered_tools or [], body.legacy_functions)
    else:
        tools = body.tool_call_mode
    if tools is None or not body.legacy_functions:
        return tools
    return FunctionCalls(tools)


def _reasoning(
    state: GatewayState, body: ChatCompletionRequest, prompt: list[int]
) -> tuple[ReasoningParser | None, str]:
    """The reasoning parser for this request, and where its grammar starts. A constrained request
    (structured output, a named or required tool call) of a thinking model is constrained on its
    answer alone, as in vLLM and SGLang: the grammar starts after the reasoning's end. Where the
    template has closed the reasoning in the prompt (thinking turned off, as Qwen3's and DeepSeek
    V3.1's templates do) there is no reasoning to split off, whatever the parser would assume of an
    output without its end marker, and the grammar holds from the first token."""
    reasoning = state.reasoning_parser()
    if reasoning is None:
        return None, ""
    tail = state.tokenizer.decode(prompt[-PROMPT_TAIL_TOKENS:], skip_special_tokens=False)
    marker = reasoning.grammar_starts_after(tail)
    if marker is None:
        return None, ""
    return reasoning, marker if body.constraint is not None else ""

"""POST /v1/chat/completions: the chat template applied, then generation, whole or streamed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from treespec.gateway.chat_messages import template_messages
from treespec.gateway.chat_reply import ChatReplies
from treespec.gateway.disconnect import cancel_on_disconnect
from treespec.gateway.errors import APIError
from treespec.gateway.function_calls import FunctionCalls
from treespec.gateway.generation import Event, TextDelta
from treespec.gateway.logprob_format import LogprobFormat
from treespec.gateway.outcome import meta_info
from treespec.gateway.reasoning_parsers.base import ReasoningParser
from treespec.gateway.responses import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatLogprobs,
    ChatMessageOut,
    MetaInfo,
)
from treespec.gateway.run import GenerationRun
from treespec.gateway.schemas import ChatCompletionRequest
from treespec.gateway.sse import DONE, StreamUsage, event_stream, primed, sse_chunk, sse_error
from treespec.gateway.state import GatewayState, gateway_state
from treespec.gateway.tool_calls import ToolCalling

router = APIRouter()

PROMPT_TAIL_TOKENS = 16  # the prompt's last tokens, read for a reasoning end the template wrote


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, request: Request, state: Annotated[GatewayState, Depends(gateway_state)]
) -> Response:
    state.check_model(body.model)
    tools = _tool_calling(state, body)
    messages = template_messages(body.messages)
    prompt = await asyncio.to_thread(
        state.tokenizer.chat_prompt,
        messages,
        body.template_tools,
        body.opens_turn,
        body.template_kwargs,
        body.continue_final_message,
    )
    reasoning, grammar_after = _reasoning(state, body, prompt)
    replies = ChatReplies(reasoning, tools)
    run = await GenerationRun.start(
        state, body, [prompt], body.token_limit, "chat", "chatcmpl", grammar_after=grammar_after
    )
    lp_format = LogprobFormat(state.tokenizer.token_texts, body.return_tokens_as_token_ids)
    if body.stream:
        events = await cancel_on_disconnect(request, primed(run.events()))
        usage = StreamUsage(body.include_usage, body.continuous_usage)
        return event_stream(_stream(run, events, usage, lp_format if body.logprobs else None, replies))
    outcome = await cancel_on_disconnect(request, run.collect())
    response = ChatCompletion(
        id=run.id,
        created=run.created,
        model=run.model,
        choices=[
            _choice(
                job.index,
                outcome.text(job.index),
                outcome.finish_reason(job.index),
                replies,
                lp_format.chat([e for e, _ in outcome.logprobs(job.index)]) if body.logprobs else None,
            )
            for job in run.jobs
        ],
        usage=outcome.usage,
        meta_info=outcome.meta_info,
    )
    return JSONResponse(response.model_dump(mode="json"))


def _tool_calling(state: GatewayState, body: ChatCompletionRequest) -> ToolCalling | None:
    """How the request's tools are called: "auto" with the model's parser, a named function or
    "required" as structured output, or not at all; for the deprecated `functions`, the same calls
    go back in the legacy shape."""
    tools = state.auto_tool_calls(body.legacy_functions) if body.auto_tool_choice else body.tool_call_mode
    if tools is None or not body.legacy_functions:
        return tools
    return FunctionCalls(tools)


def _reasoning(
    state: GatewayState, body: ChatCompletionRequest, prompt: list[int]
) -> tuple[ReasoningParser | None, str]:
    """The reasoning parser for this request, and where its grammar starts. A constrained request
    (structured output, a named or required tool call) of a thinking model is constrained on its
    answer alone, as in vLLM and SGLang: the grammar starts after the reasoning's end. Where the
    template has closed the reasoning in the prompt (thinking turned off) the grammar holds from the
    first token and there is no reasoning to split off."""
    reasoning = state.reasoning_parser()
    if reasoning is None or body.constraint is None:
        return reasoning, ""
    tail = state.tokenizer.decode(prompt[-PROMPT_TAIL_TOKENS:], skip_special_tokens=False)
    marker = reasoning.grammar_starts_after(tail)
    return (reasoning, marker) if marker is not None else (None, "")


def _choice(
    index: int, text: str, finish_reason: str, replies: ChatReplies, logprobs: ChatLogprobs | None
) -> ChatChoice:
    """A whole reply: its reasoning, its text, and the tool calls it made."""
    reply = replies.message(text, finish_reason)
    message = ChatMessageOut(
        content=reply.content,
        reasoning_content=reply.reasoning,
        tool_calls=reply.tool_calls,
        function_call=reply.function_call,
    )
    return ChatChoice(index=index, message=message, logprobs=logprobs, finish_reason=reply.finish_reason)


async def _stream(
    run: GenerationRun,
    events: AsyncGenerator[Event, None],
    usage: StreamUsage,
    logprobs: LogprobFormat | None,
    replies: ChatReplies,
) -> AsyncIterator[bytes]:
    deltas = replies.stream()

    def chunk(choice: ChatChunkChoice, event: Event | None, meta: MetaInfo | None = None) -> bytes:
        return sse_chunk(
            ChatCompletionChunk(choices=[choice], **run.chunk_fields(choice.index, event, meta, usage))
        )

    for job in run.jobs:
        yield chunk(ChatChunkChoice(index=job.index, delta={"role": "assistant", "content": ""}), None)
    try:
        async for event in events:
            if isinstance(event, TextDelta):
                lp = logprobs.chat(event.logprobs) if logprobs is not None else None
                delta = deltas.text(event.index, event.text)
                if delta or lp is not None:
                    yield chunk(ChatChunkChoice(index=event.index, delta=delta, logprobs=lp), event)
            else:
                delta, reason = deltas.end(event.index, event.finish_reason)
                if delta:
                    yield chunk(ChatChunkChoice(index=event.index, delta=delta), event)
                choice = ChatChunkChoice(index=event.index, delta={}, finish_reason=reason)
                yield chunk(choice, event, meta_info(event.spec))
    except APIError as error:
        yield sse_error(error)
        yield DONE
        return
    finally:
        await events.aclose()
    if usage.final:
        total = ChatCompletionChunk(
            id=run.id, created=run.created, model=run.model, choices=[], usage=run.outcome.usage
        )
        yield sse_chunk(total)
    yield DONE

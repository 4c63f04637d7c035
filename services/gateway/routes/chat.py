"""POST /v1/chat/completions: the chat template applied, then generation, whole or streamed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from treespec.gateway.disconnect import cancel_on_disconnect
from treespec.gateway.errors import APIError
from treespec.gateway.generation import Event, TextDelta
from treespec.gateway.logprob_format import chat_logprobs
from treespec.gateway.outcome import meta_info
from treespec.gateway.responses import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatMessageOut,
    MetaInfo,
)
from treespec.gateway.run import GenerationRun
from treespec.gateway.schemas import ChatCompletionRequest
from treespec.gateway.sse import DONE, event_stream, primed, sse_chunk, sse_error
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, request: Request, state: Annotated[GatewayState, Depends(gateway_state)]
) -> Response:
    state.check_model(body.model)
    messages = [message.template_message() for message in body.messages]
    prompt = await asyncio.to_thread(state.tokenizer.chat_prompt, messages)
    run = await GenerationRun.start(state, body, [prompt], body.token_limit, "chat", "chatcmpl")
    if body.stream:
        events = await cancel_on_disconnect(request, primed(run.events()))
        return event_stream(_stream(run, events, body.include_usage, body.logprobs is True))
    outcome = await cancel_on_disconnect(request, run.collect())
    texts = state.tokenizer.token_texts
    response = ChatCompletion(
        id=run.id,
        created=run.created,
        model=run.model,
        choices=[
            ChatChoice(
                index=job.index,
                message=ChatMessageOut(content=outcome.text(job.index)),
                logprobs=chat_logprobs(texts, [e for e, _ in outcome.logprobs(job.index)])
                if body.logprobs
                else None,
                finish_reason=outcome.finish_reason(job.index),
            )
            for job in run.jobs
        ],
        usage=outcome.usage,
        meta_info=outcome.meta_info,
    )
    return JSONResponse(response.model_dump(mode="json"))


async def _stream(
    run: GenerationRun, events: AsyncGenerator[Event, None], include_usage: bool, logprobs: bool
) -> AsyncIterator[bytes]:
    texts = run.state.tokenizer.token_texts

    def chunk(choice: ChatChunkChoice, meta: MetaInfo | None = None) -> bytes:
        return sse_chunk(
            ChatCompletionChunk(
                id=run.id, created=run.created, model=run.model, choices=[choice], meta_info=meta
            )
        )

    for job in run.jobs:
        yield chunk(ChatChunkChoice(index=job.index, delta={"role": "assistant", "content": ""}))
    try:
        async for event in events:
            if isinstance(event, TextDelta):
                lp = chat_logprobs(texts, event.logprobs) if logprobs else None
                yield chunk(ChatChunkChoice(index=event.index, delta={"content": event.text}, logprobs=lp))
            else:
                choice = ChatChunkChoice(index=event.index, delta={}, finish_reason=event.finish_reason)
                yield chunk(choice, meta_info(event.spec))
    except APIError as error:
        yield sse_error(error)
        yield DONE
        return
    finally:
        await events.aclose()
    if include_usage:
        usage = ChatCompletionChunk(
            id=run.id, created=run.created, model=run.model, choices=[], usage=run.outcome.usage
        )
        yield sse_chunk(usage)
    yield DONE

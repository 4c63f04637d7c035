"""POST /v1/chat/completions: the chat template applied, then generation, whole or streamed."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from treespec.gateway.chat_reply import ChatReplies
from treespec.gateway.chat_start import start_chat
from treespec.gateway.chat_store.record import stored_chat
from treespec.gateway.disconnect import cancel_on_disconnect
from treespec.gateway.errors import APIError
from treespec.gateway.generation import Event, TextDelta
from treespec.gateway.logprob_format import LogprobFormat
from treespec.gateway.outcome import Outcome, meta_info
from treespec.gateway.request_ids import named_by_header
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
from treespec.gateway.token_ids_out import StreamTokenIds

router = APIRouter()


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, request: Request, state: Annotated[GatewayState, Depends(gateway_state)]
) -> Response:
    state.check_model(body.model)
    body = named_by_header(body, request)
    run, replies = await start_chat(state, body, "chatcmpl-")
    lp_format = LogprobFormat(state.tokenizer.token_texts, body.return_tokens_as_token_ids)
    if body.stream:
        events = await cancel_on_disconnect(request, primed(run.abortable_events()))
        usage = StreamUsage(body.include_usage, body.continuous_usage)
        logprobs = lp_format if body.logprobs else None
        ids = StreamTokenIds([job.request.prompt_token_ids for job in run.jobs], body.return_token_ids)
        keep = _keeper(state, body, run, replies, lp_format) if body.store else None
        return event_stream(_stream(run, events, usage, logprobs, replies, ids, body.echoed, keep))
    outcome = await cancel_on_disconnect(request, run.collect())
    response = _completion(run, outcome, body, replies, lp_format)
    if body.store:
        await state.chats.put(stored_chat(body, response))
    return JSONResponse(response)


def _completion(
    run: GenerationRun,
    outcome: Outcome,
    body: ChatCompletionRequest,
    replies: ChatReplies,
    lp_format: LogprobFormat,
) -> dict[str, Any]:
    """The whole completion, as JSON: answered so, or kept for a streamed one made with `store`."""
    prompt_logprobs = None  # vLLM's: one prompt, the same for every choice
    if body.prompt_logprobs is not None:
        prompt_logprobs = lp_format.prompt(outcome.prompt_logprobs(0))
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
                body.echoed,
                outcome.token_ids(job.index) if body.return_token_ids else None,
            )
            for job in run.jobs
        ],
        usage=outcome.usage,
        meta_info=outcome.meta_info,
        prompt_logprobs=prompt_logprobs,
        prompt_token_ids=list(run.jobs[0].request.prompt_token_ids) if body.return_token_ids else None,
    )
    return response.model_dump(mode="json")


def _keeper(
    state: GatewayState,
    body: ChatCompletionRequest,
    run: GenerationRun,
    replies: ChatReplies,
    lp_format: LogprobFormat,
) -> Callable[[], Awaitable[None]]:
    """What stores a streamed completion once its stream has ended (its outcome then whole)."""

    async def keep() -> None:
        await state.chats.put(stored_chat(body, _completion(run, run.outcome, body, replies, lp_format)))

    return keep


def _choice(
    index: int,
    text: str,
    finish_reason: str,
    replies: ChatReplies,
    logprobs: ChatLogprobs | None,
    echoed: str = "",
    token_ids: list[int] | None = None,
) -> ChatChoice:
    """A whole reply: its reasoning, its text (after the echoed message's), and the tool calls it made."""
    reply = replies.message(text, finish_reason)
    message = ChatMessageOut(
        content=echoed + (reply.content or "") if echoed else reply.content,
        reasoning_content=reply.reasoning,
        tool_calls=reply.tool_calls,
        function_call=reply.function_call,
    )
    return ChatChoice(
        index=index,
        message=message,
        logprobs=logprobs,
        finish_reason=reply.finish_reason,
        token_ids=token_ids,
    )


async def _stream(
    run: GenerationRun,
    events: AsyncGenerator[Event, None],
    usage: StreamUsage,
    logprobs: LogprobFormat | None,
    replies: ChatReplies,
    ids: StreamTokenIds,
    echoed: str = "",
    keep: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """`keep`: stores the completion once it has streamed whole (`store`)."""
    deltas = replies.stream()

    def chunk(choice: ChatChunkChoice, event: Event | None, meta: MetaInfo | None = None) -> bytes:
        choice.token_ids = ids.take(choice.index)
        fields = run.chunk_fields(choice.index, event, meta, usage)
        return sse_chunk(
            ChatCompletionChunk(choices=[choice], prompt_token_ids=ids.prompt(choice.index), **fields)
        )

    for job in run.jobs:
        yield chunk(ChatChunkChoice(index=job.index, delta={"role": "assistant", "content": echoed}), None)
    try:
        async for event in events:
            ids.add(event)
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
    if keep is not None:
        await keep()
    yield DONE

"""POST /v1/completions: text or token-id prompts (one or a batch), whole or streamed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from treespec.gateway.completion_request import CompletionRequest
from treespec.gateway.disconnect import cancel_on_disconnect
from treespec.gateway.errors import APIError
from treespec.gateway.generation import Event, TextDelta
from treespec.gateway.logprob_format import LogprobFormat
from treespec.gateway.outcome import meta_info
from treespec.gateway.request_ids import named_by_header
from treespec.gateway.responses import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    MetaInfo,
    PromptLogprobs,
)
from treespec.gateway.run import GenerationRun
from treespec.gateway.sse import DONE, StreamUsage, event_stream, primed, sse_chunk, sse_error
from treespec.gateway.state import GatewayState, gateway_state
from treespec.gateway.token_ids_out import StreamTokenIds
from treespec.gateway.tokenizer import PromptTokenizer

router = APIRouter()


@router.post("/v1/completions", response_model=None)
async def completions(
    body: CompletionRequest, request: Request, state: Annotated[GatewayState, Depends(gateway_state)]
) -> Response:
    state.check_model(body.model)
    body = named_by_header(body, request)
    prompts = await asyncio.to_thread(state.tokenizer.raw_prompts, body.prompts)
    echoes = await asyncio.to_thread(_echoes, state.tokenizer, body.prompts) if body.echo else None
    run = await GenerationRun.start(
        state, body, prompts, body.token_limit, "text_completion", "cmpl-", echoes
    )
    lp_format = LogprobFormat(state.tokenizer.token_texts, body.return_tokens_as_token_ids)
    if body.stream:
        events = await cancel_on_disconnect(request, primed(run.abortable_events()))
        usage = StreamUsage(body.include_usage, body.continuous_usage)
        ids = StreamTokenIds([job.request.prompt_token_ids for job in run.jobs], body.return_token_ids)
        lp = lp_format if body.logprobs is not None else None
        return event_stream(_stream(run, events, usage, lp, ids))
    outcome = await cancel_on_disconnect(request, run.collect())

    def logprobs(index: int) -> CompletionLogprobs | None:
        if body.logprobs is None:
            return None
        entries = outcome.logprobs(index)
        return lp_format.completion([e for e, _ in entries], [offset for _, offset in entries])

    def prompt_logprobs(index: int) -> PromptLogprobs | None:
        if body.prompt_logprobs is None:
            return None
        return lp_format.prompt(outcome.prompt_logprobs(index))

    response = Completion(
        id=run.id,
        created=run.created,
        model=run.model,
        choices=[
            CompletionChoice(
                index=job.index,
                text=outcome.text(job.index),
                logprobs=logprobs(job.index),
                finish_reason=outcome.finish_reason(job.index),
                prompt_logprobs=prompt_logprobs(job.index),
                prompt_token_ids=list(job.request.prompt_token_ids) if body.return_token_ids else None,
                token_ids=outcome.token_ids(job.index) if body.return_token_ids else None,
            )
            for job in run.jobs
        ],
        usage=outcome.usage,
        meta_info=outcome.meta_info,
    )
    return JSONResponse(response.model_dump(mode="json"))


def _echoes(tokenizer: PromptTokenizer, prompts: list[str | list[int]]) -> list[str]:
    """The prompts as `echo` sends them back: text as given, token ids decoded."""
    return [p if isinstance(p, str) else tokenizer.decode(p) for p in prompts]


async def _stream(
    run: GenerationRun,
    events: AsyncGenerator[Event, None],
    usage: StreamUsage,
    logprobs: LogprobFormat | None,
    ids: StreamTokenIds,
) -> AsyncIterator[bytes]:

    def chunk(choice: CompletionChoice, event: Event, meta: MetaInfo | None = None) -> bytes:
        choice.prompt_token_ids, choice.token_ids = ids.prompt(choice.index), ids.take(choice.index)
        return sse_chunk(Completion(choices=[choice], **run.chunk_fields(choice.index, event, meta, usage)))

    try:
        async for event in events:
            ids.add(event)
            if isinstance(event, TextDelta):
                lp = None
                if logprobs is not None:
                    lp = logprobs.completion(event.logprobs, [event.offset] * len(event.logprobs))
                yield chunk(CompletionChoice(index=event.index, text=event.text, logprobs=lp), event)
            else:
                choice = CompletionChoice(index=event.index, text="", finish_reason=event.finish_reason)
                yield chunk(choice, event, meta_info(event.spec))
    except APIError as error:
        yield sse_error(error)
        yield DONE
        return
    finally:
        await events.aclose()
    if usage.final:
        yield sse_chunk(
            Completion(id=run.id, created=run.created, model=run.model, choices=[], usage=run.outcome.usage)
        )
    yield DONE

"""POST /generate: SGLang's native generation endpoint (native/request.py), answered whole or streamed
as SGLang answers it (native/output.py): one object for one prompt, a list for a batch or n > 1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from fastapi.sse import format_sse_event

from treespec.gateway.disconnect import cancel_on_disconnect
from treespec.gateway.errors import APIError
from treespec.gateway.generation import Event, TextDelta
from treespec.gateway.native.output import NativeLogprobs, NativeOutput
from treespec.gateway.native.request import NativeGenerateRequest
from treespec.gateway.run import GenerationRun
from treespec.gateway.sse import DONE, event_stream, primed, sse_error
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()


@router.post("/generate", response_model=None)
async def generate(
    body: NativeGenerateRequest, request: Request, state: Annotated[GatewayState, Depends(gateway_state)]
) -> Response:
    completion = body.completion_request(state.config.model_name)
    prompts = await asyncio.to_thread(state.tokenizer.raw_prompts, body.prompts)
    # The prompt's log-probabilities come on an empty echo, before the output's.
    echoes = [""] * len(prompts) if body.prompt_logprobs else None
    field = "text" if body.text is not None else "input_ids"
    run = await GenerationRun.start(
        state, completion, prompts, completion.token_limit, "generate", "", echoes, prompt_param=field
    )
    rids, n = body.rids(run.id), completion.n
    outputs = [
        NativeOutput(
            job.index,
            rids[job.index // n] if n == 1 else f"{rids[job.index // n]}-{job.index % n}",
            len(prompts[job.index // n]),
            len(prompts[job.index // n]) if body.prompt_logprobs else 0,
        )
        for job in run.jobs
    ]
    texts = state.tokenizer.token_texts if body.return_text_in_logprobs else None
    logprobs = NativeLogprobs(texts) if body.return_logprob else None
    start_len = max(body.logprob_start_len, 0)
    several = body.batch or n > 1
    if body.stream:
        events = await cancel_on_disconnect(request, primed(run.events()))
        return event_stream(_stream(events, outputs, logprobs, start_len, several))
    await cancel_on_disconnect(request, _collect(run, outputs))
    bodies = [output.body(logprobs, start_len) for output in outputs]
    return JSONResponse(bodies if several else bodies[0])


async def _collect(run: GenerationRun, outputs: list[NativeOutput]) -> None:
    async with aclosing(run.events()) as events:
        async for event in events:
            outputs[event.index].add(event)


async def _stream(
    events: AsyncGenerator[Event, None],
    outputs: list[NativeOutput],
    logprobs: NativeLogprobs | None,
    start_len: int,
    several: bool,
) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            output = outputs[event.index]
            output.add(event)
            if isinstance(event, TextDelta) and not (event.text or event.token_ids):
                continue  # the prompt's log-probabilities alone: they come with the first piece
            body = output.body(logprobs, start_len, index=several)
            yield format_sse_event(data_str=json.dumps(body))
    except APIError as error:
        yield sse_error(error)
    finally:
        await events.aclose()
    yield DONE

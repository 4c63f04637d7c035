"""POST /generate: SGLang's native generation endpoint (native/request.py), answered whole or streamed
as SGLang answers it (native/output.py): one object for one prompt, a list for a batch or n > 1."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from fastapi.sse import format_sse_event

from treespec.gateway.disconnect import cancel_on_disconnect
from treespec.gateway.errors import APIError
from treespec.gateway.fanout import merge
from treespec.gateway.generation import Event, TextDelta
from treespec.gateway.native.aborts import AbortTarget
from treespec.gateway.native.output import NativeLogprobs, NativeOutput
from treespec.gateway.native.request import AbortRequest, NativeGenerateRequest, PromptGroup
from treespec.gateway.run import GenerationRun
from treespec.gateway.sse import DONE, event_stream, primed, sse_error
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()


@router.post("/generate", response_model=None)
async def generate(
    body: NativeGenerateRequest, request: Request, state: Annotated[GatewayState, Depends(gateway_state)]
) -> Response:
    groups = body.groups(state.config.model_name)
    prompts = await asyncio.to_thread(state.tokenizer.raw_prompts, body.prompts)
    runs = [await _start(state, body, group, prompts) for group in groups]
    outputs = _outputs(body, groups, runs, prompts)
    texts = state.tokenizer.token_texts if body.return_text_in_logprobs else None
    logprobs = NativeLogprobs(texts) if body.return_logprob else None
    start_len = max(body.logprob_start_len, 0)
    several = body.batch or len(outputs) > 1
    targets = _abort_targets(outputs, groups)
    flags = [target.flag for target in targets]
    offsets = list(itertools.accumulate((len(run.jobs) for run in runs[:-1]), initial=0))
    sources = [
        _shifted(run.events(flags[offset : offset + len(run.jobs)]), offset)
        for run, offset in zip(runs, offsets, strict=True)
    ]
    watched = state.aborts.watch(merge(sources), targets)
    if body.stream:
        events = await cancel_on_disconnect(request, primed(watched))
        return event_stream(_stream(events, outputs, logprobs, start_len, several))
    await cancel_on_disconnect(request, _collect(watched, outputs))
    bodies = [output.body(logprobs, start_len) for output in outputs]
    return JSONResponse(bodies if several else bodies[0])


@router.post("/abort_request")
async def abort_request(
    body: AbortRequest, state: Annotated[GatewayState, Depends(gateway_state)]
) -> Response:
    """SGLang's: stop the generations of `rid` (every one with `abort_all`); 200 whether or not one runs."""
    state.aborts.abort(body.rid, body.abort_all)
    return Response(status_code=200)


def _abort_targets(outputs: list[NativeOutput], groups: list[PromptGroup]) -> list[AbortTarget]:
    """Each output's abort flag, under its rid, and under its prompt's rid when the prompt has `n`
    choices (their rids are the prompt's with `-i`)."""
    ns = [g.completion.n for g in groups for _ in range(len(g.prompts) * g.completion.n)]
    targets = []
    for output, n in zip(outputs, ns, strict=True):
        rids = (output.rid, output.rid.rsplit("-", 1)[0]) if n > 1 else (output.rid,)
        targets.append(AbortTarget(rids, asyncio.Event()))
    return targets


async def _start(
    state: GatewayState, body: NativeGenerateRequest, group: PromptGroup, prompts: list[list[int]]
) -> GenerationRun:
    """A group's run; the prompt's log-probabilities, when asked for, come on an empty echo first."""
    own = [prompts[p] for p in group.prompts]
    echoes = [""] * len(own) if body.prompt_logprobs else None
    field = "text" if body.text is not None else "input_ids"
    completion = group.completion
    return await GenerationRun.start(
        state, completion, own, completion.token_limit, "generate", "", echoes, prompt_param=field
    )


def _outputs(
    body: NativeGenerateRequest,
    groups: list[PromptGroup],
    runs: list[GenerationRun],
    prompts: list[list[int]],
) -> list[NativeOutput]:
    """One output per choice, prompt by prompt, each prompt's `n` in a row; ids from `rid`."""
    rids = body.rids(runs[0].id)
    outputs: list[NativeOutput] = []
    for group, run in zip(groups, runs, strict=True):
        n = group.completion.n
        for job in run.jobs:
            prompt = group.prompts[job.index // n]
            rid = rids[prompt] if n == 1 else f"{rids[prompt]}-{job.index % n}"
            size = len(prompts[prompt])
            outputs.append(NativeOutput(len(outputs), rid, size, size if body.prompt_logprobs else 0))
    return outputs


async def _shifted(events: AsyncGenerator[Event, None], offset: int) -> AsyncGenerator[Event, None]:
    """A run's events with their choices' places among every run's."""
    async with aclosing(events):
        async for event in events:
            yield replace(event, index=event.index + offset) if offset else event


async def _collect(events: AsyncGenerator[Event, None], outputs: list[NativeOutput]) -> None:
    async with aclosing(events):
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
        yield DONE
        return
    finally:
        await events.aclose()
    yield DONE

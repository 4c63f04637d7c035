"""POST /v1/responses: OpenAI's Responses API, run as the chat request it stands for
(responses_api/request.py), the reply given back as output items, whole or streamed as the
Responses API's typed events (responses_api/output.py). A finished response is stored unless the
request says `store: false` (responses_api/store.py; routes/stored_responses.py reads them back)."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from fastapi.sse import format_sse_event

from treespec.gateway.chat_reply import ChatReplies, ChatReplyMessage
from treespec.gateway.chat_start import start_chat
from treespec.gateway.disconnect import cancel_on_disconnect
from treespec.gateway.errors import APIError
from treespec.gateway.generation import Event, TextDelta, TokenLogprob
from treespec.gateway.logprob_format import LogprobFormat
from treespec.gateway.responses_api.output import ResponseOutput
from treespec.gateway.responses_api.request import InputItem, ResponsesRequest
from treespec.gateway.responses_api.response import response_body, response_status
from treespec.gateway.responses_api.store import ResponseStore, StoredResponse
from treespec.gateway.run import GenerationRun
from treespec.gateway.sse import event_stream, primed
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()


@router.post("/v1/responses", response_model=None)
async def create_response(
    body: ResponsesRequest, request: Request, state: Annotated[GatewayState, Depends(gateway_state)]
) -> Response:
    state.check_model(body.model)
    earlier = _earlier(state, body)
    run, replies = await start_chat(state, body.chat_request(earlier), "resp_", prompt_param="input")
    keep = _Keeper(state.responses, body, earlier)
    logprobs = _Logprobs(LogprobFormat(state.tokenizer.token_texts) if body.logprobs else None)
    if body.streams:
        events = await cancel_on_disconnect(request, primed(run.events()))
        return event_stream(_stream(body, run, events, replies, keep, logprobs))
    outcome = await cancel_on_disconnect(request, run.collect())
    reply = replies.message(outcome.text(0), outcome.finish_reason(0))
    status = response_status(reply.finish_reason)
    output = ResponseOutput()
    output.feed(_whole(reply), logprobs([entry for entry, _ in outcome.logprobs(0)]))
    output.finish(status)
    identity = (run.id, run.created, run.model)
    payload = response_body(
        body, identity, output.output(status), status, outcome.usage, outcome.meta_info, keep.stores
    )
    keep(payload)
    return JSONResponse(payload)


@dataclass(frozen=True)
class _Logprobs:
    """Tokens' log-probabilities in the Responses API's shape (chat's), or none when not asked for."""

    format: LogprobFormat | None

    def __call__(self, entries: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
        if self.format is None:
            return []
        return [token.model_dump() for token in self.format.chat(entries).content]


def _earlier(state: GatewayState, body: ResponsesRequest) -> tuple[InputItem, ...]:
    """The conversation the request continues: its previous response's (a 404 if none is stored)."""
    if body.previous_response_id is None:
        return ()
    return state.responses.get(body.previous_response_id, "previous_response_id").conversation


@dataclass(frozen=True)
class _Keeper:
    """Stores a finished response, if its request asks to and the store keeps any."""

    store: ResponseStore
    request: ResponsesRequest
    earlier: tuple[InputItem, ...]

    @property
    def stores(self) -> bool:
        return self.request.stores and self.store.enabled

    def __call__(self, payload: dict[str, Any]) -> None:
        if self.stores:
            self.store.put(StoredResponse.of(payload, self.request.items, self.earlier))


def _whole(reply: ChatReplyMessage) -> dict[str, Any]:
    """A whole reply as one delta."""
    calls = [{"index": i, **call} for i, call in enumerate(reply.tool_calls or [])]
    return {"reasoning_content": reply.reasoning, "content": reply.content, "tool_calls": calls}


async def _stream(
    body: ResponsesRequest,
    run: GenerationRun,
    events: AsyncGenerator[Event, None],
    replies: ChatReplies,
    keep: _Keeper,
    logprobs: _Logprobs,
) -> AsyncIterator[bytes]:
    numbers = itertools.count()

    def sse(event: dict[str, Any]) -> bytes:
        numbered = {**event, "sequence_number": next(numbers)}
        return format_sse_event(data_str=json.dumps(numbered), event=event["type"])

    identity = (run.id, run.created, run.model)
    started = response_body(body, identity, [], "in_progress", stored=keep.stores)
    yield sse({"type": "response.created", "response": started})
    yield sse({"type": "response.in_progress", "response": started})
    output, deltas, status = ResponseOutput(), replies.stream(), "completed"
    try:
        async for event in events:
            if isinstance(event, TextDelta):
                pieces = output.feed(deltas.text(event.index, event.text), logprobs(event.logprobs))
            else:
                delta, reason = deltas.end(event.index, event.finish_reason)
                status = response_status(reason)
                pieces = output.feed(delta) + output.finish(status)
            for piece in pieces:
                yield sse(piece)
    except APIError as error:
        yield sse({"type": "error", "code": error.code, "message": error.message, "param": error.param})
        return
    finally:
        await events.aclose()
    outcome = run.outcome
    final = response_body(
        body, identity, output.output(status), status, outcome.usage, outcome.meta_info, keep.stores
    )
    keep(final)
    yield sse({"type": f"response.{status}", "response": final})

"""POST /v1/responses: OpenAI's Responses API, run as the chat request it stands for
(responses_api/request.py), the reply given back as output items, whole or streamed as the
Responses API's typed events (responses_api/output.py, responses_api/job.py), or made in the
background (responses_api/background.py), its events streamed as they are made if asked. A
finished response is stored unless the request says `store: false` (responses_api/store.py;
routes/stored_responses.py reads them back). POST /v1/responses/input_tokens counts a response's
prompt (responses_api/input_tokens.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from treespec.gateway.chat_start import chat_prompt, start_chat
from treespec.gateway.disconnect import cancel_on_disconnect
from treespec.gateway.errors import APIError
from treespec.gateway.logprob_format import LogprobFormat
from treespec.gateway.responses_api.input_tokens import InputTokensRequest
from treespec.gateway.responses_api.job import ResponseJob, sse_events
from treespec.gateway.responses_api.request import InputItem, ResponsesRequest
from treespec.gateway.sse import event_stream, primed
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()

UNFINISHED = ("queued", "in_progress")


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(
    body: InputTokensRequest, state: Annotated[GatewayState, Depends(gateway_state)]
) -> dict[str, Any]:
    """OpenAI's input token count (responses_api/input_tokens.py)."""
    if body.model is not None:
        state.check_model(body.model)
    request = body.response_request(state.config.model_name)
    prompt = await chat_prompt(state, request.chat_request(await _earlier(state, request)))
    return {"object": "response.input_tokens", "input_tokens": len(prompt)}


@router.post("/v1/responses", response_model=None)
async def create_response(
    body: ResponsesRequest, request: Request, state: Annotated[GatewayState, Depends(gateway_state)]
) -> Response:
    state.check_model(body.model)
    earlier = await _earlier(state, body)
    chat = body.chat_request(earlier)
    run, replies = await start_chat(state, chat, "resp_", "input", "max_output_tokens")
    lp_format = LogprobFormat(state.tokenizer.token_texts) if body.logprobs else None
    # The response tells the temperature and top_p it was sampled with, as OpenAI's does.
    temperature, top_p = state.config.sampling_defaults.reported(body.temperature, body.top_p)
    told = body.model_copy(update={"temperature": temperature, "top_p": top_p})
    job = ResponseJob(told, run, replies, state.responses, earlier, lp_format, state.conversations)
    if body.background and body.streams:  # followed by this request, and later by any other
        events_log = await state.background.start_streamed(job, run.events())
        return event_stream(sse_events(events_log.follow()))
    if body.background:
        return JSONResponse(await state.background.start(job))
    if body.streams:
        events = await cancel_on_disconnect(request, primed(run.events()))
        return event_stream(sse_events(job.stream(events)))
    return JSONResponse(await cancel_on_disconnect(request, job.whole()))


async def _earlier(state: GatewayState, body: ResponsesRequest) -> tuple[InputItem, ...]:
    """The conversation the request continues: its conversation's items, or its previous response's
    (a 404 if none is stored, a 400 while it is still being made in the background). A request
    without input must continue one of them."""
    if body.input is None and body.previous_response_id is None and body.conversation_id is None:
        raise APIError(
            400,
            "Missing required parameter: 'input' (only a response that continues a previous response "
            "or a conversation may leave it out).",
            code="missing_required_parameter",
            param="input",
        )
    if body.conversation_id is not None:
        return tuple((await state.conversations.get(body.conversation_id, "conversation")).as_input())
    if body.previous_response_id is None:
        return ()
    previous = await state.responses.get(body.previous_response_id, "previous_response_id")
    if previous.body["status"] in UNFINISHED:
        raise APIError(
            400,
            f"Previous response '{previous.id}' is still {previous.body['status']}: continue it once it "
            "has finished.",
            code="previous_response_unfinished",
            param="previous_response_id",
        )
    return previous.conversation

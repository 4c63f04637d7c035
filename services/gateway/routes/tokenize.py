"""POST /tokenize and /detokenize (vLLM's and SGLang's): the served model's tokenizer and chat template,
as generation applies them, for clients that count or build prompts in tokens."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from treespec.gateway.chat_messages import ChatMessage, template_messages
from treespec.gateway.chat_template import ChatTemplateField, TemplateOptions, request_template
from treespec.gateway.errors import APIError
from treespec.gateway.prompt_ending import PromptEndingFields
from treespec.gateway.sampling import check_token_ids
from treespec.gateway.schema_types import STRICT, TemplateDocuments, TemplateKwargs, TokenId, UnicodeText
from treespec.gateway.state import GatewayState, gateway_state
from treespec.gateway.tool_schemas import MAX_TOOLS, ToolDef, template_tools

router = APIRouter()


class TokenizeRequest(PromptEndingFields, ChatTemplateField):
    """Either a `prompt` (text, as /v1/completions takes it) or chat `messages` (as /v1/chat/completions
    renders them)."""

    model_config = STRICT
    model: str | None = None
    prompt: UnicodeText | None = None
    # The tokenizer's special tokens (a BOS): by default on a prompt, off on messages (the chat
    # template writes them), as vLLM's.
    add_special_tokens: bool | None = None
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    tools: list[ToolDef] | None = Field(default=None, max_length=MAX_TOOLS)
    chat_template_kwargs: TemplateKwargs | None = None
    documents: TemplateDocuments | None = None


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeRequest(BaseModel):
    model_config = STRICT
    model: str | None = None
    tokens: list[TokenId]


class DetokenizeResponse(BaseModel):
    prompt: str


@router.post("/tokenize")
async def tokenize(
    body: TokenizeRequest, state: Annotated[GatewayState, Depends(gateway_state)]
) -> TokenizeResponse:
    if body.model is not None:
        state.check_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "Give either 'prompt' or 'messages'.", code="invalid_value")
    tokenizer = state.tokenizer
    if body.messages is not None:
        template = request_template(body.chat_template, state.config.trust_request_chat_template)
        options = TemplateOptions(
            template_tools(body.tools),
            body.opens_turn,
            body.chat_template_kwargs,
            body.continue_final_message,
            body.documents,
            bool(body.add_special_tokens),
            template,
        )
        ids = await asyncio.to_thread(tokenizer.chat_prompt, template_messages(body.messages), options)
    else:
        assert body.prompt is not None
        special = True if body.add_special_tokens is None else body.add_special_tokens
        ids = await asyncio.to_thread(tokenizer.text_prompt, body.prompt, special)
    info = await state.verifier.model_info()
    return TokenizeResponse(count=len(ids), max_model_len=info.context_length, tokens=ids)


@router.post("/detokenize")
async def detokenize(
    body: DetokenizeRequest, state: Annotated[GatewayState, Depends(gateway_state)]
) -> DetokenizeResponse:
    if body.model is not None:
        state.check_model(body.model)
    check_token_ids(body.tokens, await state.verifier.model_info(), "tokens")
    text = await asyncio.to_thread(state.tokenizer.decode, body.tokens, False)
    return DetokenizeResponse(prompt=text)

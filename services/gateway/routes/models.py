"""GET /v1/models: the one model this gateway serves."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends

from treespec.gateway.errors import APIError
from treespec.gateway.responses import ModelCard, ModelList
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()


@router.get("/v1/models")
async def list_models(state: Annotated[GatewayState, Depends(gateway_state)]) -> ModelList:
    try:
        context_length: int | None = (await state.verifier.model_info()).context_length
    except APIError:  # the verifier is down: the model is still the one configured
        context_length = None
    card = ModelCard(id=state.config.model_name, created=int(time.time()), max_model_len=context_length)
    return ModelList(data=[card])

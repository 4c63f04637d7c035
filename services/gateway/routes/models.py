"""GET /v1/models and GET /v1/models/{model}: the one model this gateway serves, under each of its
names."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from treespec.gateway.errors import APIError
from treespec.gateway.responses import ModelCard, ModelList
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()


@router.get("/v1/models")
async def list_models(state: Annotated[GatewayState, Depends(gateway_state)]) -> ModelList:
    """A card per name the model is served by (vLLM's several --served-model-name), the first first."""
    context_length = await _context_length(state)
    return ModelList(data=[_card(state, name, context_length) for name in state.config.model_names])


# `:path`: a served model name may hold a slash ("HuggingFaceTB/SmolLM2-135M-Instruct").
@router.get("/v1/models/{model:path}")
async def retrieve_model(model: str, state: Annotated[GatewayState, Depends(gateway_state)]) -> ModelCard:
    """The model's entry of the list; another name is a 404 model_not_found, as generation answers it."""
    state.check_model(model)
    return _card(state, model, await _context_length(state))


async def _context_length(state: GatewayState) -> int | None:
    try:
        return (await state.verifier.model_info()).context_length
    except APIError:  # the verifier is down: the model is still the one configured
        return None


def _card(state: GatewayState, name: str, context_length: int | None) -> ModelCard:
    root = str(state.config.model_path)
    return ModelCard(id=name, created=state.started, root=root, max_model_len=context_length)

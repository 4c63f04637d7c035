"""SGLang's and vLLM's POST /start_profile and /stop_profile: the verifier records a torch profiler
trace of its engine steps into its --profile-dir (services/verifier/server/profiler.py), until
/stop_profile or for `num_steps` steps. With several verifier replicas, the one the call reaches."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, Field

from treespec.gateway.errors import APIError
from treespec.gateway.schema_types import STRICT
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()


class StartProfileRequest(BaseModel):
    """SGLang's body, as far as it applies: traces go to the verifier's own directory, and record
    the CPU (and on a CUDA verifier the GPU)."""

    model_config = STRICT
    num_steps: int | None = Field(default=None, ge=1)  # None: until /stop_profile
    record_shapes: bool = False
    output_dir: str | None = None
    activities: list[str] | None = None

    def check(self) -> None:
        if self.output_dir is not None:
            raise APIError(
                400,
                "Traces go to the verifier's --profile-dir; a request cannot choose where they are written.",
                code="unsupported_parameter",
                param="output_dir",
            )
        if self.activities is not None and not set(self.activities) <= {"CPU", "GPU", "CUDA"}:
            raise APIError(400, "activities are CPU and GPU.", code="invalid_value", param="activities")


@router.post("/start_profile")
async def start_profile(
    state: Annotated[GatewayState, Depends(gateway_state)],
    body: Annotated[StartProfileRequest | None, Body()] = None,
) -> dict[str, Any]:
    request = body or StartProfileRequest()
    request.check()
    path = await state.verifier.start_profile(request.num_steps or 0, request.record_shapes)
    return {"status": "ok", "message": "Start profiling.", "trace_path": path}


@router.post("/stop_profile")
async def stop_profile(state: Annotated[GatewayState, Depends(gateway_state)]) -> dict[str, Any]:
    path = await state.verifier.stop_profile()
    return {"status": "ok", "message": "Stop profiling.", "trace_path": path}

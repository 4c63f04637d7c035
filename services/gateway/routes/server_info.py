"""SGLang's server and model information: GET /get_server_info (also /server_info) and
GET /get_model_info (also /model_info). SGLang's tools read them; `sglang.bench_serving` and
accuracy scripts take the acceptance length from `internal_states[0]["avg_spec_accept_length"]`
(committed tokens per verify step since the verifier started, as SGLang counts it). With several
verifier replicas the figures are those of the replica the call reaches."""

from __future__ import annotations

import json
from importlib.metadata import version as package_version
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from treespec.gateway.state import GatewayState, gateway_state
from treespec.v1 import verifier_pb2

router = APIRouter()


@router.get("/get_server_info")
@router.get("/server_info")
async def server_info(state: Annotated[GatewayState, Depends(gateway_state)]) -> dict[str, Any]:
    info = await state.verifier.model_info()
    stats = await state.verifier.stats()
    steps, topk, draft_tokens = info.speculation_budget
    speculative = bool(info.speculative_algorithm)
    return {
        "model_path": str(state.config.model_path),
        "tokenizer_path": str(state.config.model_path),
        "served_model_name": state.config.model_name,
        "context_length": info.context_length,
        "speculative_algorithm": info.speculative_algorithm or None,
        "speculative_num_steps": steps if speculative else None,
        "speculative_eagle_topk": topk if speculative else None,
        "speculative_num_draft_tokens": draft_tokens if speculative else None,
        "version": package_version("treespec"),
        "internal_states": [_internal_state(stats)],
    }


@router.get("/get_model_info")
@router.get("/model_info")
async def model_info(state: Annotated[GatewayState, Depends(gateway_state)]) -> dict[str, Any]:
    config = json.loads((state.config.model_path / "config.json").read_text())
    return {
        "model_path": str(state.config.model_path),
        "tokenizer_path": str(state.config.model_path),
        "is_generation": True,
        # The defaults a request's own fields override (sampling_defaults.py); None: OpenAI's.
        "preferred_sampling_params": state.config.sampling_defaults.as_request_fields() or None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": config.get("model_type"),
        "architectures": config.get("architectures"),
    }


def _internal_state(stats: verifier_pb2.EngineStats) -> dict[str, Any]:
    spec = stats.speculation
    queried = stats.prefix_cache_query_tokens
    return {
        "avg_spec_accept_length": spec.committed_tokens / spec.verify_steps if spec.verify_steps else None,
        "spec_verify_steps": spec.verify_steps,
        "spec_drafted_tokens": spec.drafted_tokens,
        "spec_accepted_tokens": spec.accepted_tokens,
        "running_requests": stats.running_requests,
        "waiting_requests": stats.waiting_requests,
        "kv_blocks_total": stats.kv_blocks_total,
        "kv_blocks_free": stats.kv_blocks_free,
        "prefix_cache_hit_rate": stats.prefix_cache_hit_tokens / queried if queried else None,
    }

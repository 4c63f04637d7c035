"""The HTTP routes, one module per endpoint family; `routers` gives every module's router."""

from __future__ import annotations

import importlib

from fastapi import APIRouter

MODULES = (
    "batches",  # /v1/batches
    "cache",  # SGLang's /flush_cache, vLLM's /reset_prefix_cache
    "chat",  # /v1/chat/completions
    "completions",  # /v1/completions
    "conversations",  # /v1/conversations and their items
    "files",  # /v1/files
    "invocations",  # vLLM's /invocations (SageMaker)
    "models",  # /v1/models
    "native",  # SGLang's /generate
    "ops",  # /health, /metrics, /version
    "profile",  # SGLang's and vLLM's /start_profile, /stop_profile
    "responses_api",  # /v1/responses
    "server_info",  # SGLang's /get_server_info, /get_model_info
    "stored_chat",  # /v1/chat/completions listed, and each by id: read, updated, deleted, messages
    "stored_responses",  # /v1/responses/{id} and its input items, deletion, cancelling
    "tokenize",  # /tokenize, /detokenize
)


def routers() -> list[tuple[str, APIRouter]]:
    """(module name, its router) for every module."""
    return [(name, importlib.import_module(f"{__name__}.{name}").router) for name in MODULES]

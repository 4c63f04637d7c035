"""The gateway's configuration: one frozen dataclass, built from CLI flags at the edge."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from treespec.gateway.cors import CorsPolicy
from treespec.gateway.log_options import LogOptions
from treespec.gateway.reasoning_parsers import REASONING_PARSERS
from treespec.gateway.sampling_defaults import SamplingDefaults
from treespec.gateway.tls import TlsFiles
from treespec.gateway.tool_parsers import TOOL_CALL_PARSERS

DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_RESPONSES_STORE_SIZE = 1024
DEFAULT_RESPONSES_STORE_TTL_S = 30 * 24 * 3600  # as long as OpenAI keeps responses
DEFAULT_FILES_MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class GatewayConfig:
    # host:port of each verifier replica; one DNS name resolving to all replicas works too.
    verifier_addresses: tuple[str, ...]
    # The Hugging Face folder the verifier serves: the gateway loads its tokenizer and chat template.
    model_path: Path
    # The names clients may call the model by (vLLM's several --served-model-name), the first the one
    # it is listed and reported by; none: the model folder's name.
    served_model_names: tuple[str, ...] = ()
    api_keys: tuple[str, ...] = ()  # empty: no authentication
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    host: str = "127.0.0.1"
    port: int = 8000
    # Seconds a GetModelInfo or health call may take before the verifier counts as unavailable.
    verifier_timeout_s: float = 5.0
    model_info_attempts: int = 3
    # The model's tool-call format, for tool_choice "auto" (a name in TOOL_CALL_PARSERS); None: refused.
    tool_call_parser: str | None = None
    # Thinking models: splits the reasoning off the answer (a name in REASONING_PARSERS); None: all text.
    reasoning_parser: str | None = None
    # Responses API responses kept for previous_response_id and GET (the least recently used go
    # first); 0: none is kept.
    responses_store_size: int = DEFAULT_RESPONSES_STORE_SIZE
    # Where they are kept: None, the gateway's memory; a redis:// URL, Redis, shared by every replica
    # (responses expiring this many seconds after they were last written).
    responses_store_url: str | None = None
    responses_store_ttl_s: int = DEFAULT_RESPONSES_STORE_TTL_S
    # The chat template (its text) instead of the model's own; None: the model's.
    chat_template: str | None = None
    # Whether a request may bring its own chat template (vLLM's `chat_template` field).
    trust_request_chat_template: bool = False
    # A token limit the client set beyond the context's room after the prompt: cut to that room
    # (SGLang's --allow-auto-truncate); by default a 400, as vLLM and SGLang answer.
    allow_auto_truncate: bool = False
    # The Files API's files (batch inputs and outputs; beside the responses): their total bytes at most.
    files_max_bytes: int = DEFAULT_FILES_MAX_BYTES
    # What a request that leaves sampling fields out samples with (the model's generation_config.json).
    sampling_defaults: SamplingDefaults = field(default_factory=SamplingDefaults)
    # Which web pages may call the gateway from a browser (by default any, as in vLLM and SGLang).
    cors: CorsPolicy = field(default_factory=CorsPolicy)
    tls: TlsFiles | None = None  # HTTPS with these files; None: plain HTTP
    # X-Request-Id headers, the HTTP server's log, a line per generation (vLLM's flags).
    logs: LogOptions = field(default_factory=LogOptions)

    def __post_init__(self) -> None:
        if not self.verifier_addresses:
            raise ValueError("at least one verifier address is required")
        if self.max_body_bytes < 1:
            raise ValueError("max_body_bytes must be positive")
        if self.files_max_bytes < 1:
            raise ValueError("files_max_bytes must be positive")
        if self.responses_store_size < 0:
            raise ValueError("responses_store_size cannot be negative")
        if self.responses_store_ttl_s < 1:
            raise ValueError("responses_store_ttl_s must be positive")
        if self.tool_call_parser is not None and self.tool_call_parser not in TOOL_CALL_PARSERS:
            known = ", ".join(sorted(TOOL_CALL_PARSERS))
            raise ValueError(f"unknown tool-call parser {self.tool_call_parser!r} (known: {known})")
        if self.reasoning_parser is not None and self.reasoning_parser not in REASONING_PARSERS:
            known = ", ".join(sorted(REASONING_PARSERS))
            raise ValueError(f"unknown reasoning parser {self.reasoning_parser!r} (known: {known})")

    @property
    def model_name(self) -> str:
        return self.model_names[0]

    @property
    def model_names(self) -> tuple[str, ...]:
        return self.served_model_names or (self.model_path.name,)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

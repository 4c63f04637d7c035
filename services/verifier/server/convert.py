"""Protobuf messages <-> the engine's domain types. proto3 `optional` fields: absent = the default."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from treespec.kernels.logprobs import TokenLogprobs
from treespec.v1 import verifier_pb2 as pb
from treespec.verifier.engine import Engine
from treespec.verifier.grammar.constraint import ConstraintKind, OutputConstraint
from treespec.verifier.request import (
    FinishReason,
    GenerationRequest,
    SamplingParams,
    SpeculationParams,
)
from treespec.verifier.server.observer import EngineSnapshot
from treespec.verifier.stats import SpecStats

FINISH_REASONS: dict[FinishReason, pb.FinishReason] = {
    FinishReason.STOP: pb.FINISH_REASON_STOP,
    FinishReason.LENGTH: pb.FINISH_REASON_LENGTH,
    FinishReason.ABORT: pb.FINISH_REASON_ABORT,
}

_SAMPLING_DEFAULTS = SamplingParams()


# ---- protobuf -> domain --------------------------------------------------------------------------


def generation_request(
    msg: pb.GenerateRequest, speculation_defaults: SpeculationParams, trace_context: Mapping[str, str]
) -> GenerationRequest:
    """Raises ValueError for what the engine cannot take. Values the engine validates itself (the
    prompt against the vocabulary and context, sampling ranges) are left to it."""
    if not msg.request_id:
        raise ValueError("request_id must not be empty")
    speculation = None
    if msg.HasField("speculation"):
        speculation = speculation_params(msg.speculation, speculation_defaults)
    return GenerationRequest(
        request_id=msg.request_id,
        prompt_ids=list(msg.prompt_token_ids),
        sampling=sampling_params(msg.sampling),
        speculation=speculation,
        trace_context=dict(trace_context),
        cache_salt=msg.cache_salt,
        priority=msg.priority,
        prediction=list(msg.prediction_token_ids),
    )


def sampling_params(msg: pb.SamplingParams) -> SamplingParams:
    d = _SAMPLING_DEFAULTS
    return SamplingParams(
        temperature=_get(msg, "temperature", d.temperature),
        top_p=_get(msg, "top_p", d.top_p),
        top_k=_get(msg, "top_k", d.top_k),
        min_p=_get(msg, "min_p", d.min_p),
        seed=_get(msg, "seed", d.seed),
        max_new_tokens=_get(msg, "max_new_tokens", d.max_new_tokens),
        stop_token_ids=tuple(msg.stop_token_ids),
        ignore_eos=msg.ignore_eos,
        logprobs=_get(msg, "logprobs", d.logprobs),
        prompt_logprobs=_get(msg, "prompt_logprobs", d.prompt_logprobs),
        presence_penalty=_get(msg, "presence_penalty", d.presence_penalty),
        frequency_penalty=_get(msg, "frequency_penalty", d.frequency_penalty),
        repetition_penalty=_get(msg, "repetition_penalty", d.repetition_penalty),
        logit_bias=tuple(sorted(msg.logit_bias.items())),
        min_tokens=_get(msg, "min_tokens", d.min_tokens),
        constraint=output_constraint(msg.constraint) if msg.HasField("constraint") else None,
        allowed_token_ids=tuple(msg.allowed_token_ids),
        bad_words=tuple(tuple(word.token_ids) for word in msg.bad_words),
    )


def output_constraint(msg: pb.OutputConstraint) -> OutputConstraint | None:
    """None for a message with no kind set (or `json_object: false`): free text."""
    kind = msg.WhichOneof("kind")
    if kind is None or (kind == "json_object" and not msg.json_object):
        return None
    after = msg.starts_after
    if kind == "choice":
        return OutputConstraint(ConstraintKind.CHOICE, choices=tuple(msg.choice.choices), starts_after=after)
    if kind == "json_object":
        return OutputConstraint(ConstraintKind.JSON_OBJECT, starts_after=after)
    return OutputConstraint(ConstraintKind(kind), spec=getattr(msg, kind), starts_after=after)


def speculation_params(msg: pb.SpeculationParams, defaults: SpeculationParams) -> SpeculationParams:
    """Absent fields take the verifier's defaults. A tree may not exceed the verifier's
    num_draft_tokens: its KV pool and context length are sized for that."""
    params = SpeculationParams(
        enabled=_get(msg, "enabled", defaults.enabled),
        num_steps=_get(msg, "num_steps", defaults.num_steps),
        eagle_topk=_get(msg, "eagle_topk", defaults.eagle_topk),
        num_draft_tokens=_get(msg, "num_draft_tokens", defaults.num_draft_tokens),
    )
    if params.num_draft_tokens > defaults.num_draft_tokens:
        raise ValueError(
            f"speculation.num_draft_tokens is {params.num_draft_tokens}; "
            f"this verifier allows at most {defaults.num_draft_tokens}"
        )
    return params


def _get(msg: Message, name: str, default: Any) -> Any:
    return getattr(msg, name) if msg.HasField(name) else default


# ---- domain -> protobuf --------------------------------------------------------------------------


def generate_chunk(
    token_ids: list[int],
    finish_reason: FinishReason | None = None,
    usage: pb.Usage | None = None,
    stats: SpecStats | None = None,
    logprobs: TokenLogprobs | None = None,
    prompt_logprobs: TokenLogprobs | None = None,
) -> pb.GenerateChunk:
    chunk = pb.GenerateChunk(token_ids=token_ids)
    if logprobs is not None:
        chunk.logprobs.extend(token_logprob_messages(logprobs))
    if prompt_logprobs is not None:
        chunk.prompt_logprobs.extend(token_logprob_messages(prompt_logprobs))
    if finish_reason is not None:
        chunk.finish_reason = FINISH_REASONS[finish_reason]
    if usage is not None:
        chunk.usage.CopyFrom(usage)
    if stats is not None:
        chunk.speculation.CopyFrom(speculation_stats(stats))
    return chunk


def token_logprob_messages(logprobs: TokenLogprobs) -> list[pb.TokenLogprob]:
    return [
        pb.TokenLogprob(logprob=lp, top_token_ids=ids, top_logprobs=top, rank=rank)
        for lp, ids, top, rank in zip(
            logprobs.chosen, logprobs.top_ids, logprobs.top_logprobs, logprobs.ranks, strict=True
        )
    ]


def speculation_stats(stats: SpecStats) -> pb.SpeculationStats:
    return pb.SpeculationStats(
        verify_steps=stats.verify_steps,
        drafted_tokens=stats.drafted_tokens,
        accepted_tokens=stats.accepted_tokens,
        committed_tokens=stats.committed_tokens,
        acceptance_length=stats.acceptance_length,
        acceptance_by_depth=stats.acceptance_by_depth,
        drafted_by_depth=stats.drafted_by_depth,
        accepted_by_depth=stats.accepted_by_depth,
    )


def speculation_params_message(params: SpeculationParams) -> pb.SpeculationParams:
    return pb.SpeculationParams(
        enabled=params.enabled,
        num_steps=params.num_steps,
        eagle_topk=params.eagle_topk,
        num_draft_tokens=params.num_draft_tokens,
    )


def engine_stats(snapshot: EngineSnapshot) -> pb.EngineStats:
    return pb.EngineStats(
        running_requests=snapshot.running_requests,
        waiting_requests=snapshot.waiting_requests,
        kv_blocks_total=snapshot.kv_blocks_total,
        kv_blocks_free=snapshot.kv_blocks_free,
        speculation=speculation_stats(snapshot.speculation),
        prefix_cache_blocks=snapshot.prefix_cache_blocks,
        prefix_cache_query_tokens=snapshot.prefix_cache_query_tokens,
        prefix_cache_hit_tokens=snapshot.prefix_cache_hit_tokens,
    )


def model_info(engine: Engine, model_name: str, speculative_algorithm: str) -> pb.ModelInfo:
    return pb.ModelInfo(
        model_name=model_name,
        vocab_size=engine.model.config.vocab_size,
        context_length=engine.context_length,
        eos_token_ids=sorted(engine.eos_token_ids),
        speculative_algorithm=speculative_algorithm,
        speculation_defaults=speculation_params_message(engine.config.speculation),
    )

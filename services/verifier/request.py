"""What a client asks of the engine and what it gets back."""

from __future__ import annotations

import enum
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from treespec.kernels.logprobs import TokenLogprobs
from treespec.kernels.penalties import Penalties
from treespec.shared.drafting.token_tree import TreeBudget
from treespec.shared.rpc.errors import FailedPreconditionError
from treespec.shared.rpc.limits import MAX_BAD_WORD_TOKENS, MAX_BAD_WORDS, MAX_TOP_LOGPROBS
from treespec.verifier.grammar.constraint import OutputConstraint
from treespec.verifier.stats import SpecStats


class InvalidRequestError(ValueError):
    """A request the engine refuses: bad parameters, or a prompt beyond the context."""


class EngineBusyError(FailedPreconditionError):
    """What needs an idle engine was asked of one with requests (flushing the prefix cache)."""


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy; top_k <= 0, top_p 1 and min_p 0 are off."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    # Return each output token's log-probability and this many most likely alternatives (0..20);
    # None: no log-probabilities.
    logprobs: int | None = None
    # The same for the prompt's tokens (from the second on: the first has no context); None: none.
    prompt_logprobs: int | None = None
    # kernels/penalties.py: presence and frequency over the output, repetition over prompt and output.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, amount in [-100, 100]) pairs
    min_tokens: int = 0  # no stop token (EOS, stop_token_ids) before this many output tokens
    constraint: OutputConstraint | None = None  # structured output: what the output must match
    allowed_token_ids: tuple[int, ...] = ()  # only these may be generated (empty: any)
    bad_words: tuple[tuple[int, ...], ...] = ()  # token sequences no output may end with

    @property
    def adjusts_logits(self) -> bool:
        """Whether the sampling distribution is not the logits' own (bias, min_tokens, penalties,
        a constraint, allowed or banned tokens)."""
        return (
            bool(self.logit_bias)
            or self.penalties.active
            or self.min_tokens > 0
            or self.constraint is not None
            or bool(self.allowed_token_ids)
            or bool(self.bad_words)
        )

    def logit_token_ids(self) -> dict[str, list[int]]:
        """The token ids whose logits the request adjusts, by field (the engine checks them against
        its vocabulary)."""
        return {
            "logit_bias": [t for t, _ in self.logit_bias],
            "allowed_token_ids": list(self.allowed_token_ids),
            "bad_words": [t for word in self.bad_words for t in word],
        }

    def stop_ids(self, eos_token_ids: Collection[int]) -> frozenset[int]:
        """The tokens that end this request: its stop token ids, and EOS unless it ignores EOS."""
        return frozenset(self.stop_token_ids) | (frozenset() if self.ignore_eos else frozenset(eos_token_ids))

    @property
    def penalties(self) -> Penalties:
        return Penalties(self.presence_penalty, self.frequency_penalty, self.repetition_penalty)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> None:
        checks = [
            (math.isfinite(self.temperature) and self.temperature >= 0, "temperature must be >= 0"),
            (0.0 < self.top_p <= 1.0, "top_p must be in (0, 1]"),
            (0.0 <= self.min_p <= 1.0, "min_p must be in [0, 1]"),
            (self.max_new_tokens >= 1, "max_new_tokens must be >= 1"),
            (0 <= self.min_tokens <= self.max_new_tokens, "min_tokens must be in [0, max_new_tokens]"),
            (all(t >= 0 for t in self.stop_token_ids), "stop token ids must be >= 0"),
            (
                self.logprobs is None or 0 <= self.logprobs <= MAX_TOP_LOGPROBS,
                f"logprobs must be in [0, {MAX_TOP_LOGPROBS}]",
            ),
            (
                self.prompt_logprobs is None or 0 <= self.prompt_logprobs <= MAX_TOP_LOGPROBS,
                f"prompt_logprobs must be in [0, {MAX_TOP_LOGPROBS}]",
            ),
            (-2.0 <= self.presence_penalty <= 2.0, "presence_penalty must be in [-2, 2]"),
            (-2.0 <= self.frequency_penalty <= 2.0, "frequency_penalty must be in [-2, 2]"),
            (
                math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0,
                "repetition_penalty must be > 0",
            ),
            (
                all(t >= 0 and -100.0 <= a <= 100.0 for t, a in self.logit_bias),
                "logit_bias amounts must be in [-100, 100]",
            ),
            (
                len(self.bad_words) <= MAX_BAD_WORDS
                and all(1 <= len(word) <= MAX_BAD_WORD_TOKENS for word in self.bad_words),
                f"bad_words must be at most {MAX_BAD_WORDS} token sequences of 1 to "
                f"{MAX_BAD_WORD_TOKENS} tokens",
            ),
            (all(t >= 0 for ids in self.logit_token_ids().values() for t in ids), "token ids must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidRequestError(message)


@dataclass(frozen=True)
class SpeculationParams:
    """Per-request speculation (SGLang's names and defaults); `enabled=False` is plain decoding."""

    enabled: bool = True
    num_steps: int = 5
    eagle_topk: int = 4
    num_draft_tokens: int = 8

    @property
    def budget(self) -> TreeBudget:
        return self.tree_budget()

    def tree_budget(self, node_cost: float = 0.0, tree_cost: float = 0.0) -> TreeBudget:
        """The budget a drafter gets, with this step's costs of a node and of a tree (verify_cost.py)."""
        return TreeBudget(
            num_draft_tokens=self.num_draft_tokens,
            num_steps=self.num_steps,
            topk=self.eagle_topk,
            node_cost=node_cost,
            tree_cost=tree_cost,
        )

    def validate(self) -> None:
        if self.num_draft_tokens < 1 or self.num_steps < 0 or self.eagle_topk < 1:
            raise InvalidRequestError(
                "speculation needs num_draft_tokens >= 1, num_steps >= 0, eagle_topk >= 1"
            )


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt_ids: Sequence[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    speculation: SpeculationParams | None = None  # None: the engine's default
    trace_context: Mapping[str, str] = field(default_factory=dict)  # W3C trace context, for drafters
    # vLLM's cache_salt: shares cached state (prefix cache, a drafter's memory) only with the same salt
    cache_salt: str = ""
    # vLLM's priority, under the priority scheduling policy: lower values are admitted first and
    # preempted last (ties: the earlier arrival). 0 under first come, first served.
    priority: int = 0
    # OpenAI's predicted output, tokenized: what the output is expected to repeat, drafted from
    # beside the drafter (prediction.py); it never changes the output. Empty: none.
    prediction: Sequence[int] = ()


class FinishReason(enum.Enum):
    STOP = "stop"  # a stop token (or EOS)
    LENGTH = "length"  # max_new_tokens or the context limit
    ABORT = "abort"


@dataclass(frozen=True)
class RequestOutput:
    """New tokens of one request from one engine step; the last one carries the finish reason."""

    request_id: str
    token_ids: list[int]
    finish_reason: FinishReason | None = None
    num_prompt_tokens: int = 0
    stats: SpecStats | None = None  # on the finishing output
    logprobs: TokenLogprobs | None = None  # one row per token id, when the request asked for them
    # On the request's first output, when asked for: one row per prompt token from the second on.
    prompt_logprobs: TokenLogprobs | None = None
    num_cached_tokens: int = 0  # on the finishing output: prompt tokens found in the prefix cache

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

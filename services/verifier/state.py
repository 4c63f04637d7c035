"""The engine's mutable view of one request."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from treespec.kernels.logprobs import TokenLogprobs
from treespec.verifier.grammar.matcher import GrammarState
from treespec.verifier.prediction import PredictedOutput
from treespec.verifier.request import FinishReason, GenerationRequest, SpeculationParams
from treespec.verifier.stats import SpecStats


class Phase(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class RequestState:
    """tokens = prompt + output. K/V exists for tokens[:kv_len]; once the prompt is in, exactly one
    token (the last one sampled) is pending, and the next forward computes its K/V as a tree root."""

    request: GenerationRequest
    speculation: SpeculationParams
    arrival: int
    tokens: list[int]
    generator: torch.Generator | None
    phase: Phase = Phase.WAITING
    kv_len: int = 0
    blocks: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stats: SpecStats = field(default_factory=SpecStats)
    num_preemptions: int = 0
    # Prompt log-probabilities read so far (when the request asked for them), until the first output.
    prompt_logprobs: list[TokenLogprobs] = field(default_factory=list)
    prompt_logprobs_upto: int = 1  # the next prompt position whose token needs its log-probability
    grammar: GrammarState | None = None  # structured output: where the output stands in its grammar
    # Prefix caching: the key ids of the leading blocks that are cached (shared or registered).
    prefix_chain: list[int] = field(default_factory=list)
    cached_tokens: int = 0  # prompt tokens found in the prefix cache when the request was admitted
    prediction: PredictedOutput | None = None  # OpenAI's predicted output, drafted from (prediction.py)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def max_tree_nodes(self) -> int:
        """The rows a decode step may verify: a tree's when the request drafts, or a chain's from its
        predicted output."""
        tree = self.speculation.num_draft_tokens if self.speculation.enabled else 1
        return max(tree, self.prediction.max_rows if self.prediction is not None else 1)

    @property
    def num_prompt(self) -> int:
        return len(self.request.prompt_ids)

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.num_prompt

    @property
    def in_prefill(self) -> bool:
        """Some of the known tokens besides the pending one still lack K/V (a prompt, or a recompute)."""
        return self.kv_len < len(self.tokens) - 1 or self.num_output == 0

    @property
    def prefill_remaining(self) -> int:
        return len(self.tokens) - self.kv_len

"""The verifier engine: continuous batching of requests over the target model, with speculation.

One step: schedule -> draft -> forward -> verify -> commit (one module each). `add_request` and
`abort` may be called from any thread; they take effect at the start of the next step.
"""

from __future__ import annotations

import itertools
import json
import logging
import queue
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from treespec.kernels.logprobs import TokenLogprobs
from treespec.shared.drafting.drafter import Drafter, salt_argument
from treespec.shared.model.attention.layered import attention_backend
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.kv_cache import BlockAllocator, KVCache
from treespec.shared.model.loader import load_model
from treespec.shared.model.prefix_cache import PrefixCache
from treespec.shared.rpc.limits import MAX_PREDICTION_TOKENS
from treespec.verifier.commit_stage import CommitStage, StopRules
from treespec.verifier.config import EngineConfig
from treespec.verifier.draft_stage import DraftStage
from treespec.verifier.feature_cache import FeatureCache
from treespec.verifier.feature_publisher import FeaturePublisher
from treespec.verifier.forward_stage import ForwardStage
from treespec.verifier.grammar.compiler import GrammarCompiler
from treespec.verifier.grammar.constraint import OutputConstraint
from treespec.verifier.grammar.matcher import GrammarState
from treespec.verifier.grammar.reasoning_gate import ReasoningGate
from treespec.verifier.prediction import PredictedOutput
from treespec.verifier.request import (
    EngineBusyError,
    FinishReason,
    GenerationRequest,
    InvalidRequestError,
    RequestOutput,
    SpeculationParams,
)
from treespec.verifier.scheduler import Scheduler
from treespec.verifier.speculation_gate import GatePolicy, SpeculationGate
from treespec.verifier.state import Phase, RequestState
from treespec.verifier.stats import SpecStats
from treespec.verifier.step_timing import StepTimes, StepTimings
from treespec.verifier.verify_cost import FixedNodeCost, VerifyCost, measure_verify_cost
from treespec.verifier.verify_cost_fit import OnlineVerifyCost
from treespec.verifier.verify_stage import verify

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Abort:
    request_id: str


@dataclass(frozen=True)
class GenerationResult:
    token_ids: list[int]
    finish_reason: FinishReason
    stats: SpecStats
    logprobs: TokenLogprobs | None = None  # when the request asked for them
    prompt_logprobs: TokenLogprobs | None = None  # the prompt's, from its second token on


class Engine:
    def __init__(
        self, config: EngineConfig, drafter: Drafter | None = None, model: CausalLM | None = None
    ) -> None:
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        self.config = config
        self.model = model or load_model(config.model_path, config.load_options())
        mc = self.model.config
        self.context_length = min(
            config.context_length or mc.max_position_embeddings, mc.max_position_embeddings
        )
        if config.max_total_tokens < self.context_length + config.max_tree_rows:
            # A request at the context limit must still fit alone, or it could never finish.
            self.context_length = config.max_total_tokens - config.max_tree_rows
        self.cache = KVCache.allocate(
            mc, config.num_blocks, config.page_size, self.model.dtype, self.model.device
        )
        self.allocator = BlockAllocator(config.num_blocks)
        self.prefix_cache = PrefixCache(self.allocator, config.page_size) if config.prefix_caching else None
        self.feature_cache = (
            FeatureCache(config.num_blocks, config.page_size) if config.prefix_caching else None
        )
        self.scheduler = Scheduler(
            self.allocator,
            config.page_size,
            config.max_running_requests,
            config.chunked_prefill_size,
            self.prefix_cache,
            by_priority=config.scheduling_policy == "priority",
        )
        if self.prefix_cache is not None and self.feature_cache is not None:
            self.prefix_cache.complete = self.feature_cache.holds_block
        self.drafter = drafter
        self.stats = SpecStats()
        self.timings = StepTimings()  # totals over the steps that ran a batch
        self.last_step: StepTimes | None = None  # the last step's, None when it ran no batch
        self._draft = DraftStage(drafter, mc.vocab_size, self.context_length)
        self.gate = SpeculationGate(
            GatePolicy(config.adaptive_speculation, config.speculative_disable_by_batch_size)
        )
        self._forward = ForwardStage(self.model, self.cache, attention_backend(mc))
        self._verify_cost = self._node_cost_model()
        eos = set(mc.eos_token_ids) | _generation_eos(config.model_path)
        self.eos_token_ids: frozenset[int] = frozenset(eos)
        self.grammars = GrammarCompiler(config.model_path, mc.vocab_size, self.eos_token_ids)
        self._commit = CommitStage(
            self.cache,
            StopRules(eos, self.context_length),
            drafter,
            self.stats,
            FeaturePublisher(self.feature_cache),
        )
        self._inbox: queue.SimpleQueue[RequestState | _Abort] = queue.SimpleQueue()
        self._states: dict[str, RequestState] = {}
        self._arrivals = itertools.count()

    # ---- thread-safe entry points -------------------------------------------------------------

    def add_request(self, request: GenerationRequest) -> None:
        """Validate now (raises InvalidRequestError) and queue for the next step."""
        speculation = request.speculation or self.config.speculation
        request.sampling.validate()
        speculation.validate()
        self._check_prompt(request)
        if request.priority != 0 and self.config.scheduling_policy != "priority":
            raise InvalidRequestError(
                "priority is only taken under the priority scheduling policy (--scheduling-policy priority)"
            )
        grammar = self._grammar(request.sampling.constraint)
        seed = request.sampling.seed
        generator = None if request.sampling.greedy else torch.Generator(self.model.device)
        if generator is not None:
            generator.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, ()).item()))
        state = RequestState(
            request,
            speculation,
            next(self._arrivals),
            list(request.prompt_ids),
            generator=generator,
            grammar=grammar,
            prediction=self._prediction(request),
        )
        self._inbox.put(state)

    def abort(self, request_id: str) -> None:
        self._inbox.put(_Abort(request_id))

    # ---- the engine loop (one thread) ----------------------------------------------------------

    def has_work(self) -> bool:
        return bool(self._states) or not self._inbox.empty()

    def step(self) -> list[RequestOutput]:
        self.last_step = None
        outputs = self._drain_inbox()
        self._follow_feature_spec()
        batch = self.scheduler.schedule()
        if batch.empty:
            return outputs
        step_start = time.perf_counter()
        batch_size = len(batch.decodes)
        cost = self.verify_cost_at(batch_size)  # the online fit solved once for both prices
        asks, gated = self._asks_drafter(batch.decodes)
        draft_start = time.perf_counter()
        trees = self._draft.trees(
            batch.decodes, cost.node_cost(batch_size), cost.tree_cost(batch_size), ask_drafter=asks
        )
        ring = self.drafter.feature_ring if self.drafter is not None else None
        start = time.perf_counter()
        draft_s = start - draft_start if self.drafter is not None and not gated else None
        result = self._forward.run(batch, trees, ring.spec if ring is not None else None)
        verdicts = verify(result, self.eos_token_ids)
        forward_s = time.perf_counter() - start
        rows = sum(item.num_new for item in result.items)
        drafted = sum(item.num_new > 1 for item in result.items)
        # A step the gate left plain is not an observation: the fit prices the steps that draft (its
        # one-row steps in among them made it price nodes lower and trees grow 2.7x, no faster).
        if isinstance(self._verify_cost, OnlineVerifyCost) and not batch.prefills and not gated:
            self._verify_cost.observe(rows, forward_s, drafted, batch_size)
        committed = 0
        for out in self._commit.run(result, verdicts):
            outputs.append(out)
            committed += len(out.token_ids)
            if out.finished:
                self._finish(self._states[out.request_id])
            else:
                self.scheduler.trim(self._states[out.request_id])
        for state in self.scheduler.running:
            self.scheduler.cache_committed(state)
        self.last_step = StepTimes(time.perf_counter() - step_start, draft_s, gated, self._commit.drafter_s)
        self.timings.add(self.last_step)
        if asks and not batch.prefills and all(s.prediction is None for s in batch.decodes):
            # The plain step this one stands for: less the drafting (asking for trees, telling the
            # drafter what was committed), less the draft rows' part of the forward (not a step
            # verifying a predicted output's chain: its tokens are the request's).
            step_s, plain_share = self.last_step.step_s, cost.plain_share(batch_size, rows, drafted)
            plain_s = step_s - self.last_step.drafting_s - forward_s * (1.0 - plain_share)
            self.gate.observe(batch_size, committed, step_s, plain_s)
        return outputs

    def _asks_drafter(self, decodes: list[RequestState]) -> tuple[bool, bool]:
        """(whether this step asks the drafter for trees, whether the speculation gate left it out)."""
        if self.drafter is None or not decodes:
            return False, False
        asks = self.gate.drafts([s.request_id for s in decodes])
        return asks, not asks

    def generate(
        self,
        requests: Iterable[GenerationRequest],
        on_output: Callable[[RequestOutput], None] | None = None,
    ) -> dict[str, GenerationResult]:
        """Run requests to completion (tests, benchmarks, the embedded mode); `on_output` sees each
        step's outputs as they come (a benchmark times the first token with it)."""
        tokens: dict[str, list[int]] = {}
        logprobs: dict[str, list[TokenLogprobs]] = {}
        prompt_logprobs: dict[str, TokenLogprobs] = {}
        for r in requests:
            self.add_request(r)
            tokens[r.request_id] = []
            logprobs[r.request_id] = []
        results: dict[str, GenerationResult] = {}
        while self.has_work():
            for out in self.step():
                if on_output is not None:
                    on_output(out)
                tokens[out.request_id].extend(out.token_ids)
                if out.logprobs is not None:
                    logprobs[out.request_id].append(out.logprobs)
                if out.prompt_logprobs is not None:
                    prompt_logprobs[out.request_id] = out.prompt_logprobs
                if out.finish_reason is not None:
                    stats = out.stats or SpecStats()
                    parts = logprobs[out.request_id]
                    results[out.request_id] = GenerationResult(
                        tokens[out.request_id],
                        out.finish_reason,
                        stats,
                        TokenLogprobs.join(parts) if parts else None,
                        prompt_logprobs.get(out.request_id),
                    )
        return results

    # ---- introspection ----------------------------------------------------------------------

    @property
    def verify_cost(self) -> VerifyCost | FixedNodeCost:
        """What this engine tells drafters a draft node costs while it decodes a single request."""
        return self.verify_cost_at(1)

    def verify_cost_at(self, batch_size: int) -> VerifyCost | FixedNodeCost:
        """What this engine tells drafters a draft node costs in a step of `batch_size` decodes:
        configured, or measured at start and refined from its decode steps since (verify_cost_fit.py)."""
        cost = self._verify_cost
        return cost.at(batch_size) if isinstance(cost, OnlineVerifyCost) else cost

    @property
    def verify_cost_observations(self) -> int:
        """Decode steps the measured cost has been refined with (0 with a configured cost)."""
        cost = self._verify_cost
        return cost.observations if isinstance(cost, OnlineVerifyCost) else 0

    def measure_verify_cost(self, tree_nodes: int) -> VerifyCost:
        """Time forwards of 1 and `tree_nodes` rows; only while no request holds KV blocks (the probe
        writes into the pool's first slots)."""
        if self.num_free_blocks != self.allocator.num_blocks:
            raise RuntimeError("the verify cost is measured on an idle engine only")
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
        return measure_verify_cost(self.model, self._forward.backend, self.cache, tree_nodes)

    def flush_cache(self) -> int:
        """Forget every cached prompt prefix; the blocks it held. Only on an idle engine (a running
        request's blocks stay its own): EngineBusyError otherwise."""
        if self.has_work():
            raise EngineBusyError("the prefix cache is flushed only while no request runs or waits")
        if self.prefix_cache is None:
            return 0
        before = self.prefix_cache.num_cached_blocks
        self.prefix_cache.clear()
        return before - self.prefix_cache.num_cached_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.allocator.num_free

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    # ---- internals ----------------------------------------------------------------------------

    def _prediction(self, request: GenerationRequest) -> PredictedOutput | None:
        rows = self.config.prediction_draft_tokens
        return PredictedOutput(request.prediction, rows) if request.prediction and rows > 1 else None

    def _check_prompt(self, request: GenerationRequest) -> None:
        n = len(request.prompt_ids)
        if n == 0:
            raise InvalidRequestError("the prompt is empty")
        if n >= self.context_length:
            raise InvalidRequestError(
                f"the prompt has {n} tokens; the context length is {self.context_length}"
            )
        vocab = self.model.config.vocab_size
        if any(not 0 <= t < vocab for t in request.prompt_ids):
            raise InvalidRequestError(f"prompt token ids must be in [0, {vocab})")
        if len(request.prediction) > MAX_PREDICTION_TOKENS:
            raise InvalidRequestError(f"the prediction has more than {MAX_PREDICTION_TOKENS} tokens")
        checked = {**request.sampling.logit_token_ids(), "prediction": list(request.prediction)}
        for name, token_ids in checked.items():
            if any(not 0 <= t < vocab for t in token_ids):
                raise InvalidRequestError(f"{name} token ids must be in [0, {vocab})")

    def compile_constraint(self, constraint: OutputConstraint | None) -> None:
        """Compile a structured-output constraint now (cached; raises InvalidRequestError), so that
        `add_request` finds it ready: a server calls this off its event loop first."""
        if constraint is not None:
            self.grammars.compile(constraint)

    def _grammar(self, constraint: OutputConstraint | None) -> GrammarState | None:
        if constraint is None:
            return None
        gate = None
        if constraint.starts_after:
            gate = ReasoningGate(constraint.starts_after.encode(), self.grammars.token_bytes())
        return GrammarState(self.grammars.compile(constraint), self.model.config.vocab_size, gate)

    def _drain_inbox(self) -> list[RequestOutput]:
        outputs: list[RequestOutput] = []
        while not self._inbox.empty():
            item = self._inbox.get_nowait()
            if isinstance(item, _Abort):
                state = self._states.get(item.request_id)
                if state is not None:
                    state.finish_reason = FinishReason.ABORT
                    self._finish(state)
                    outputs.append(
                        RequestOutput(
                            state.request_id,
                            [],
                            FinishReason.ABORT,
                            state.num_prompt,
                            num_cached_tokens=state.cached_tokens,
                        )
                    )
            elif item.request_id in self._states:
                log.warning("duplicate request id %s ignored", item.request_id)
            else:
                self._states[item.request_id] = item
                self.scheduler.add(item)
                r = item.request
                salt = salt_argument(r.cache_salt)
                self._drafter_call("open", item.request_id, list(r.prompt_ids), r.trace_context, *salt)
        return outputs

    def _follow_feature_spec(self) -> None:
        """A drafter that reads the target's features (EAGLE) needs them for every prompt position,
        cached ones too: the feature cache follows its spec (a co-located one may attach at any time)."""
        if self.feature_cache is None:
            return
        ring = self.drafter.feature_ring if self.drafter is not None else None
        spec = ring.spec if ring is not None else None
        self.feature_cache.follow(spec, self.model.dtype, self.model.device)

    def _finish(self, state: RequestState) -> None:
        self._commit.publisher.forget(state.request_id)
        self.scheduler.remove(state)
        state.phase = Phase.FINISHED
        del self._states[state.request_id]
        self._drafter_call("close", state.request_id)

    def _node_cost_model(self) -> OnlineVerifyCost | FixedNodeCost:
        """The configured costs, or (where anything drafts: a drafter, or requests' predicted outputs)
        ones measured now, while the pool is free, and refined from the decode steps to come."""
        if self.config.node_cost is not None:
            return FixedNodeCost(self.config.node_cost, self.config.tree_cost)
        if self.drafter is None and self.config.prediction_draft_tokens <= 1:
            return FixedNodeCost(0.0)
        nodes = max(self.config.speculation.num_draft_tokens, SpeculationParams().num_draft_tokens)
        cost = self.measure_verify_cost(nodes)
        log.info(
            "verify cost: %.2f ms per step, %.3f ms per extra row, %.3f ms more per tree "
            "(node cost %.3f, tree cost %.3f at batch 1)",
            cost.step_s * 1e3,
            cost.row_s * 1e3,
            cost.tree_s * 1e3,
            cost.node_cost(1),
            cost.tree_cost(1),
        )
        return OnlineVerifyCost(cost)

    def _drafter_call(self, method: str, *args: object) -> None:
        if self.drafter is None:
            return
        try:
            getattr(self.drafter, method)(*args)
        except Exception as exc:  # a failing drafter costs speed, never a request
            log.warning("drafter %s failed: %r", method, exc)


def _generation_eos(model_path: Path) -> set[int]:
    """EOS ids from generation_config.json, which chat models often set beyond config.json's."""
    file = Path(model_path) / "generation_config.json"
    if not file.is_file():
        return set()
    value = json.loads(file.read_text()).get("eos_token_id")
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, list) else {int(value)}

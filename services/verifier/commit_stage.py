"""Step 5: move accepted K/V into place, append tokens, apply stop rules, report, tell the drafter."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field

import torch

from treespec.kernels.kv_compaction import compact_kv
from treespec.kernels.logprobs import TokenLogprobs, token_logprobs
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.model.kv_cache import KVCache
from treespec.verifier.feature_publisher import FeaturePublisher
from treespec.verifier.forward_stage import ForwardItem, ForwardResult
from treespec.verifier.request import FinishReason, RequestOutput
from treespec.verifier.state import RequestState
from treespec.verifier.stats import SpecStats
from treespec.verifier.verify_stage import Verdict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StopRules:
    eos_token_ids: Collection[int]
    context_length: int

    def cut(self, state: RequestState, emitted: list[int]) -> tuple[list[int], FinishReason | None]:
        """The emitted tokens up to and including the first that ends the request."""
        sampling = state.request.sampling
        stops = sampling.stop_ids(self.eos_token_ids)
        for i, token in enumerate(emitted):
            if token in stops:
                return emitted[: i + 1], FinishReason.STOP
            if state.num_output + i + 1 >= sampling.max_new_tokens:
                return emitted[: i + 1], FinishReason.LENGTH
            if len(state.tokens) + i + 1 >= self.context_length:
                return emitted[: i + 1], FinishReason.LENGTH
        return emitted, None


@dataclass
class CommitStage:
    cache: KVCache
    stop_rules: StopRules
    drafter: Drafter | None
    totals: SpecStats
    publisher: FeaturePublisher = field(default_factory=FeaturePublisher)
    # The last run's time spent on the drafter's behalf: publishing features and telling it what each
    # request committed (its history, its memory's writes). Work a plain step does not do.
    drafter_s: float = 0.0

    def run(self, result: ForwardResult, verdicts: list[Verdict]) -> list[RequestOutput]:
        self.drafter_s = 0.0
        features = self._publish(result, verdicts)
        self._compact(verdicts)
        for item in result.items:
            if item.prompt_rows:
                _read_prompt_logprobs(item, result)
        for item in result.items:
            if item.tree is None:  # a prefill chunk that leaves more prompt for later steps
                item.state.kv_len += item.num_new
        return [self._commit(v, features.get(v.item.state.request_id), result) for v in verdicts]

    def _publish(self, result: ForwardResult, verdicts: list[Verdict]) -> dict[str, FeatureSlots]:
        ring = self.drafter.feature_ring if self.drafter is not None else None
        if ring is None:
            return {}
        start = time.perf_counter()
        try:
            return self.publisher.publish(ring, result, verdicts)
        except Exception as exc:  # the drafter's trouble never reaches the request: it just gets none
            log.warning("publishing features failed, drafting without them: %r", exc)
            return {}
        finally:
            self.drafter_s += time.perf_counter() - start

    def _compact(self, verdicts: list[Verdict]) -> None:
        """Accepted node path[j] sits in scratch slot kv_len + path[j]; it belongs at kv_len + j."""
        src: list[torch.Tensor] = []
        dst: list[torch.Tensor] = []
        for v in verdicts:
            path = v.acceptance.path
            moved = [j for j in range(len(path)) if path[j] != j]
            if v.item.is_decode and moved:
                base = v.item.state.kv_len
                src.append(v.item.kv_slots[[base + path[j] for j in moved]])
                dst.append(v.item.kv_slots[[base + j for j in moved]])
        if src:
            k, vv = self.cache.flat()
            device = self.cache.k.device
            compact_kv(k, vv, torch.cat(src).to(device), torch.cat(dst).to(device))

    def _commit(
        self, verdict: Verdict, features: FeatureSlots | None, result: ForwardResult
    ) -> RequestOutput:
        item, acceptance = verdict.item, verdict.acceptance
        state = item.state
        assert item.tree is not None
        state.kv_len += len(acceptance.path) if item.is_decode else item.num_new
        emitted, finish = self.stop_rules.cut(state, acceptance.emitted_tokens(item.tree.tokens))
        if state.grammar is not None:
            end = state.grammar.advance(emitted)
            if end is not None:  # the output is complete (or, by a bug, off its grammar)
                emitted, finish = emitted[: end + 1], FinishReason.STOP
        state.tokens.extend(emitted)
        if item.is_decode:
            state.stats.record_step(
                item.tree_depth, item.tree.num_nodes - 1, len(acceptance.path) - 1, len(emitted)
            )
        state.finish_reason = finish
        if finish is None and self.drafter is not None:
            self._tell_drafter(state.request_id, emitted, features)
        if finish is not None:
            self.totals.merge(state.stats)
            self.publisher.forget(state.request_id)
        return RequestOutput(
            request_id=state.request_id,
            token_ids=emitted,
            finish_reason=finish,
            num_prompt_tokens=state.num_prompt,
            stats=state.stats if finish is not None else None,
            logprobs=_logprobs(verdict, emitted, result),
            prompt_logprobs=_take_prompt_logprobs(state),
            num_cached_tokens=state.cached_tokens if finish is not None else 0,
        )

    def _tell_drafter(self, request_id: str, tokens: list[int], features: FeatureSlots | None) -> None:
        assert self.drafter is not None
        start = time.perf_counter()
        try:
            self.drafter.commit(request_id, tokens, features)
        except Exception as exc:  # the drafter's trouble never reaches the request
            log.warning("drafter commit failed for %s: %r", request_id, exc)
        finally:
            self.drafter_s += time.perf_counter() - start


def _logprobs(verdict: Verdict, emitted: list[int], result: ForwardResult) -> TokenLogprobs | None:
    """Emitted token j came from the target's row after accepted node path[j]."""
    k = verdict.item.state.request.sampling.logprobs
    if k is None:
        return None
    path = torch.tensor(verdict.acceptance.path[: len(emitted)], dtype=torch.long)
    rows = (path + verdict.item.logits_start).to(result.logits.device)
    return token_logprobs(result.logits[rows], torch.tensor(emitted, dtype=torch.long), k)


def _read_prompt_logprobs(item: ForwardItem, result: ForwardResult) -> None:
    state = item.state
    k = state.request.sampling.prompt_logprobs
    assert k is not None
    start, count = item.prompt_logits_start, item.prompt_rows
    rows = torch.arange(start, start + count, device=result.logits.device)
    targets = torch.tensor(state.tokens[item.prompt_target : item.prompt_target + count], dtype=torch.long)
    state.prompt_logprobs.append(token_logprobs(result.logits[rows], targets, k))
    state.prompt_logprobs_upto = item.prompt_target + count


def _take_prompt_logprobs(state: RequestState) -> TokenLogprobs | None:
    """The prompt's log-probabilities, once: with the request's first output."""
    if not state.prompt_logprobs or state.prompt_logprobs_upto < state.num_prompt:
        return None
    parts, state.prompt_logprobs = state.prompt_logprobs, []
    return TokenLogprobs.join(parts)

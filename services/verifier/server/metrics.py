"""Prometheus metrics of the verifier, on a registry the server owns (no process-wide state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from treespec.verifier.server.observer import EngineSnapshot, FinishedRequest

PREFIX = "treespec_verifier_"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ACCEPTANCE_BUCKETS = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 12.0, 16.0)


class VerifierMetrics:
    """A LoopObserver: request figures when a request finishes, engine gauges after each step.

    Acceptance by tree depth d over any window: rate(depth_accepted_steps_total{depth=d}) /
    rate(depth_drafted_steps_total{depth=d}); the gauge `acceptance_by_depth` holds it since start.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            PREFIX + "requests", "Finished requests.", ["finish_reason"], registry=registry
        )
        self.prompt_tokens = Counter(PREFIX + "prompt_tokens", "Prompt tokens processed.", registry=registry)
        self.output_tokens = Counter(PREFIX + "output_tokens", "Tokens generated.", registry=registry)
        self.cached_prompt_tokens = Counter(
            PREFIX + "cached_prompt_tokens",
            "Prompt tokens whose K/V came from the prefix cache (of prompt_tokens).",
            registry=registry,
        )
        self.time_to_first_token = self._seconds(
            "time_to_first_token", "From submission to the first generated token."
        )
        self.time_per_output_token = self._seconds(
            "time_per_output_token", "Mean time per generated token after the first, per request."
        )
        self.acceptance_length = Histogram(
            PREFIX + "acceptance_length",
            "Tokens committed per verify step (bonus token included), per finished request.",
            buckets=ACCEPTANCE_BUCKETS,
            registry=registry,
        )
        self.verify_steps = Counter(PREFIX + "verify_steps", "Verify (decode) steps.", registry=registry)
        self.drafted_tokens = Counter(PREFIX + "drafted_tokens", "Draft tokens proposed.", registry=registry)
        self.accepted_tokens = Counter(
            PREFIX + "accepted_tokens", "Draft tokens accepted.", registry=registry
        )
        self.depth_drafted = Counter(
            PREFIX + "depth_drafted_steps",
            "Verify steps whose tree reached this depth.",
            ["depth"],
            registry=registry,
        )
        self.depth_accepted = Counter(
            PREFIX + "depth_accepted_steps",
            "Verify steps that accepted a draft token at this depth.",
            ["depth"],
            registry=registry,
        )
        self.acceptance_by_depth = Gauge(
            PREFIX + "acceptance_by_depth",
            "Accepted / drafted at this tree depth, since start.",
            ["depth"],
            registry=registry,
        )
        self.step_seconds = self._seconds(
            "step", "Wall time of an engine step that ran a batch (draft, forward, verify, commit)."
        )
        self.draft_seconds = self._seconds(
            "draft", "Time an engine step spent asking the drafter for trees (with a drafter only)."
        )
        self.drafter_commit_seconds = self._seconds(
            "drafter_commit",
            "Time an engine step spent telling the drafter what each request committed, and publishing "
            "its features (with a drafter only, gated steps too).",
        )
        self.gated_steps = Counter(
            PREFIX + "speculation_gated_steps",
            "Decode steps the speculation gate ran without asking the drafter (drafting measured slower "
            "than plain decoding at their batch size, or --speculative-disable-by-batch-size).",
            registry=registry,
        )
        self.preemptions = Counter(
            PREFIX + "preemptions",
            "Requests preempted: their K/V dropped when the KV cache ran out of blocks, recomputed when "
            "they are admitted again (vLLM's num_preemptions).",
            registry=registry,
        )
        self._preemptions_seen = 0  # the engine's total at the last step
        self.running_requests = Gauge(PREFIX + "running_requests", "Requests running.", registry=registry)
        self.waiting_requests = Gauge(PREFIX + "waiting_requests", "Requests waiting.", registry=registry)
        self.kv_blocks_used = Gauge(PREFIX + "kv_blocks_used", "KV cache blocks in use.", registry=registry)
        self.kv_blocks_total = Gauge(PREFIX + "kv_blocks_total", "KV cache blocks.", registry=registry)
        self.node_cost = Gauge(
            PREFIX + "node_cost",
            "One more draft node's verify cost for a single request, in its decoding steps (drafters "
            "keep nodes worth it; measured at start, refined from decode steps).",
            registry=registry,
        )
        self.tree_cost = Gauge(
            PREFIX + "tree_cost",
            "A draft tree's fixed verify cost for a single request, in its decoding steps.",
            registry=registry,
        )
        self.prefix_cache_blocks = Gauge(
            PREFIX + "prefix_cache_blocks", "KV blocks the prefix cache holds.", registry=registry
        )

    def _seconds(self, name: str, text: str) -> Histogram:
        """A latency histogram `<PREFIX><name>_seconds`."""
        return Histogram(PREFIX + name + "_seconds", text, buckets=LATENCY_BUCKETS, registry=self.registry)

    def request_finished(self, record: FinishedRequest) -> None:
        output = record.output
        assert output.finish_reason is not None
        self.requests.labels(output.finish_reason.value).inc()
        self.prompt_tokens.inc(output.num_prompt_tokens)
        self.cached_prompt_tokens.inc(output.num_cached_tokens)
        self.output_tokens.inc(record.num_output_tokens)
        if record.time_to_first_token_s is not None:
            self.time_to_first_token.observe(record.time_to_first_token_s)
        if record.time_per_output_token_s is not None:
            self.time_per_output_token.observe(record.time_per_output_token_s)
        stats = output.stats
        if stats is None or stats.verify_steps == 0:
            return
        self.acceptance_length.observe(stats.acceptance_length)
        self.verify_steps.inc(stats.verify_steps)
        self.drafted_tokens.inc(stats.drafted_tokens)
        self.accepted_tokens.inc(stats.accepted_tokens)
        for depth, (drafted, accepted) in enumerate(
            zip(stats.drafted_by_depth, stats.accepted_by_depth, strict=True), start=1
        ):
            self.depth_drafted.labels(str(depth)).inc(drafted)
            self.depth_accepted.labels(str(depth)).inc(accepted)

    def engine_stepped(self, snapshot: EngineSnapshot) -> None:
        if snapshot.last_step is not None:
            step = snapshot.last_step
            self.step_seconds.observe(step.step_s)
            if step.draft_s is not None:
                self.draft_seconds.observe(step.draft_s)
            if step.gated:
                self.gated_steps.inc()
            if step.draft_s is not None or step.gated:  # a step with a drafter
                self.drafter_commit_seconds.observe(step.told_s)
        self.preemptions.inc(snapshot.preemptions - self._preemptions_seen)
        self._preemptions_seen = snapshot.preemptions
        self.running_requests.set(snapshot.running_requests)
        self.waiting_requests.set(snapshot.waiting_requests)
        self.kv_blocks_used.set(snapshot.kv_blocks_used)
        self.kv_blocks_total.set(snapshot.kv_blocks_total)
        self.prefix_cache_blocks.set(snapshot.prefix_cache_blocks)
        self.node_cost.set(snapshot.node_cost)
        self.tree_cost.set(snapshot.tree_cost)
        for depth, ratio in enumerate(snapshot.speculation.acceptance_by_depth, start=1):
            self.acceptance_by_depth.labels(str(depth)).set(ratio)

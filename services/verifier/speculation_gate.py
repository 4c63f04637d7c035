"""Whether an engine step asks the drafter at all: drafting that does not pay at a batch size is left out.

Drafters price their trees from a model of the costs (verify_cost.py, shared/drafting/draft_pacing.py),
and the model misses what it does not see: a drafter's Python and dispatch, its round trip, its work
per request in a batch. On two CPU cores, eight requests at once decoded with the EAGLE-3 head at
0.81-0.88x plain decoding: at that batch a node must be accepted 58% of the time to pay for its row,
so the trees were nearly empty (0.04-0.09 tokens more a request and step), yet the head's catch-up
and first level still ran for every request, 9-12 ms of a 47-80 ms step. vLLM's answer is a number
the operator must find (`disable_by_batch_size`, honoured too: steps of that many decodes or more
never draft); this gate measures.

Every drafting step (a decode step without a prefill chunk) is compared with the plain step it stands
for, measured within the step itself: its wall time less the drafting time (asking for trees, and
telling the drafter what each request committed: its history and memory writes, EAGLE's features) and
less the part of its forward that the draft rows took, by the verify cost's split of a forward into a
part per step, per row and per tree (the engine's `plain_s`). Plain steps taken now and then to compare
with were first tried: on a shared VM the machine's speed drifted by up to 2x within seconds, far more
than the few percent to be told apart, and drafting steps came out 40% faster than plain ones taken a
few seconds before. The ratio of a step's tokens per second to its plain step's (the plain step commits
one token a request) is averaged, with its spread, per batch regime (1, 2-3, 4-7, 8-15, ... decodes, as
the verify cost's fit has them: the batch moves within one as requests finish and join).

Drafting is left out when the average falls below 1 by more than `MARGIN` plus `Z` standard errors: a
batch's steps commit about the same tokens each, so its figures settle within a few steps, while a
single request's gains come in bursts (a stretch its drafter predicts after one it cannot), which the
per-request pacing handles and this gate must not cut short. The regime then decodes plainly for
`FIRST_WAIT` steps and drafts again for `MIN_STEPS` steps (the first of them not counted: a drafter
that deferred its work, such as EAGLE's catch-up over every token it missed, does it then); each wait
that ends in a failed try doubles, up to `MAX_WAIT`. A verdict is about the requests it was drawn
from: once none of the requests of the step that left drafting out is in the batch (at batch size 1,
the next request), the wait ends in a try for the new ones (the waits still double while tries fail:
turning over a batch of eight at a time, waits started afresh cost most of what the gate saved).
Likewise a batch none of whose requests was in the regime's last step (at batch size 1, the next
request) starts the average afresh, its first step uncounted: a request was judged on the steps of
the one before it, so that after seven slow steps of another request one step of its own sent a
request that copied its prompt word for word into a wait that outlasted it.
Outputs never change: a step that does not draft is plain decoding.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from treespec.verifier.verify_cost_fit import regime

MIN_STEPS = 8  # drafting steps averaged in a regime before drafting there may be left out
WINDOW = 16  # the average weighs the newest step 1 / WINDOW once it has seen that many
MARGIN = 0.03  # drafting is left out when it runs slower than plain by more than this share ...
Z = 2.0  # ... and by more than this many standard errors of its average
FIRST_WAIT = 16  # plain steps before drafting is tried again, doubled after every failed try
MAX_WAIT = 256


@dataclass
class _Average:
    """Drafting steps' speed over their plain steps', and its variance: plain figures over the first
    WINDOW steps, then exponential ones that follow the text and the load changing."""

    mean: float = 0.0
    variance: float = 0.0
    steps: int = 0

    def add(self, value: float) -> None:
        self.steps += 1
        w = 1.0 / min(self.steps, WINDOW)
        diff = value - self.mean
        self.mean += w * diff
        self.variance = (1.0 - w) * (self.variance + w * diff * diff)

    @property
    def squared_error(self) -> float:
        """The mean's squared standard error (an exponential mean's effective count: (2 - w) / w)."""
        if self.steps < WINDOW:
            return self.variance / self.steps if self.steps else 0.0
        w = 1.0 / WINDOW
        return self.variance * w / (2.0 - w)

    def slower(self) -> bool:
        """Below plain by more than the margin, beyond the noise."""
        shortfall = 1.0 - MARGIN - self.mean
        return shortfall > 0.0 and shortfall * shortfall > Z * Z * self.squared_error


@dataclass
class _Regime:
    """The verdict for a batch regime."""

    speed: _Average = field(default_factory=_Average)  # drafting steps' speed over their plain steps'
    wait: int = 0  # plain steps still to run before drafting is tried again
    next_wait: int = FIRST_WAIT
    warm_up: bool = False  # the next drafting step follows a wait: not counted
    batch: frozenset[str] = frozenset()  # the requests of the step last asked about
    judged: frozenset[str] = frozenset()  # the requests of the step that left drafting out


@dataclass(frozen=True)
class GatePolicy:
    adaptive: bool = True  # measure and leave out drafting where it does not pay
    disable_by_batch_size: int | None = None  # steps of this many decodes or more never draft


@dataclass
class SpeculationGate:
    policy: GatePolicy = field(default_factory=GatePolicy)
    left_out_steps: int = 0  # steps the gate ran plainly, over the engine's life
    _regimes: dict[int, _Regime] = field(default_factory=dict)

    def drafts(self, request_ids: Collection[str]) -> bool:
        """Whether a step decoding these requests asks the drafter; counts a step it does not."""
        asks = self._asks(len(request_ids), frozenset(request_ids))
        if not asks:
            self.left_out_steps += 1
        return asks

    def observe(self, batch_size: int, tokens: int, seconds: float, plain_seconds: float) -> None:
        """A drafting step's outcome: the tokens it committed over its `batch_size` requests, its wall
        time, and what the plain step it stands for would have taken (one token a request)."""
        if not self.policy.adaptive or batch_size < 1 or tokens < 1:
            return
        if not (seconds > 0.0 and plain_seconds > 0.0):
            return
        record = self._regimes.setdefault(regime(batch_size), _Regime())
        if record.warm_up:
            record.warm_up = False
            return
        record.speed.add(tokens * plain_seconds / (batch_size * seconds))
        if record.speed.steps < MIN_STEPS:
            return
        if record.speed.slower():
            record.wait, record.next_wait = record.next_wait, min(2 * record.next_wait, MAX_WAIT)
            record.speed, record.judged = _Average(), record.batch
        elif record.speed.steps == MIN_STEPS:  # a try that paid
            record.next_wait = FIRST_WAIT

    def leaves_out(self, batch_size: int) -> bool:
        """Whether steps of `batch_size` decodes are decoding plainly now (waiting, or at or above
        disable_by_batch_size), for reports and tests."""
        limit = self.policy.disable_by_batch_size
        if limit is not None and batch_size >= limit:
            return True
        record = self._regimes.get(regime(batch_size))
        return record is not None and record.wait > 0

    def _asks(self, batch_size: int, batch: frozenset[str]) -> bool:
        limit = self.policy.disable_by_batch_size
        if limit is not None and batch_size >= limit:
            return False
        if not self.policy.adaptive:
            return True
        record = self._regimes.setdefault(regime(batch_size), _Regime())
        turned_over = bool(record.batch) and record.batch.isdisjoint(batch)
        record.batch = batch
        if record.wait > 0 and record.judged.isdisjoint(batch):  # other requests now: a try for them
            record.wait, record.warm_up = 0, True
        elif turned_over and record.wait == 0:  # other requests now: judged on their own steps
            record.speed, record.warm_up = _Average(), True
        if record.wait == 0:
            return True
        record.wait -= 1
        record.warm_up = record.wait == 0
        return False

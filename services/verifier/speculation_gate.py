"""Whether an engine step asks the drafter at all: drafting that does not pay at a batch size is left out.

Drafters price their trees from a model of the costs (verify_cost.py, shared/drafting/draft_pacing.py),
and the model misses what it does not see: a drafter's Python and dispatch, its round trip, its work
per request in a batch. On two CPU cores, eight requests at once decoded with the EAGLE-3 head at
0.82-0.87x plain decoding: at that batch a node must be accepted 58% of the time to pay for its row,
so the trees were nearly empty (0.04-0.09 tokens more a request and step), yet the head's catch-up
and first level still ran for every request, 9-12 ms of a 47-80 ms step. vLLM's answer is a number
the operator must find (`disable_by_batch_size`, honoured too: steps of that many decodes or more
never draft); this gate measures.

It compares the tokens committed per second of whole steps (the decoding requests of a step without
a prefill chunk) that asked the drafter with those of steps that did not, at the same batch size:
plain figures per batch size (`PLAIN_FIRST` plain steps when a batch size is new, then one after every
`PLAIN_EVERY` drafting steps while drafting runs below `PLAIN_NEAR` times plain, as contexts grow and
the machine's load changes), and each drafting step's speed relative to them averaged, with its
spread, per batch regime (1, 2-3, 4-7, 8-15, ... decodes, as the verify cost's fit has them: the
batch moves within one as requests finish and join, and a verdict per exact size was drawn again and
again in the tail of every batch). A plain step is taken right after a drafting step that gained next
to nothing, where it costs next to nothing: taken in a row, the first plain steps cut the copy of a
sentence short at its start in a test (acceptance 2.0 where it had been more).

Drafting is left out when it runs slower than plain by more than `MARGIN` plus `Z` standard errors of
the two averages: a batch's steps commit about the same tokens each, so its figures settle within a
few steps, while a single request's gains come in bursts (a stretch its drafter predicts after one it
cannot), which the per-request pacing handles and this gate must not cut short. The batch size then
decodes plainly for `FIRST_WAIT` steps and drafts again for `MIN_STEPS` steps (the first of them not
counted: a drafter that deferred its work, such as EAGLE's catch-up over every token it missed, does
it then); each wait that ends in a failed try doubles, up to `MAX_WAIT`. A verdict is about the
requests it was drawn from: once none of the requests of the step that left drafting out is in the
batch (at batch size 1, the next request), the wait ends in a try for the new ones (the waits still
double while tries fail: a try costs about what nine drafting steps lose, and turning over a batch
of eight at a time, waits started afresh cost most of what the gate saved). Outputs never change: a
step that does not draft is plain decoding.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from treespec.verifier.verify_cost_fit import regime

MIN_STEPS = 8  # drafting steps averaged in a regime before drafting there may be left out
WINDOW = 16  # the averages weigh the newest step 1 / WINDOW once they have seen that many
PLAIN_EVERY = 64  # a plain step after this many drafting ones ...
PLAIN_NEAR = 1.25  # ... while drafting runs below this multiple of plain
IDLE_REQUESTS = 8  # a plain step is taken after a drafting step that gained at most a token per this many
OVERDUE = 256  # requests (none below 8), or after this many drafting steps whatever they gained
PLAIN_FIRST = 4  # plain steps a batch size takes before its drafting steps are judged
MARGIN = 0.03  # drafting is left out when its tokens/s fall below plain's by more than this share
Z = 2.0  # ... and by more than this many standard errors of the difference
FIRST_WAIT = 16  # plain steps before drafting is tried again, doubled after every failed try
MAX_WAIT = 256


@dataclass
class _Average:
    """Tokens per second over steps, and their variance: plain figures over the first WINDOW steps,
    then exponential ones that follow contexts growing and load changing."""

    mean: float = 0.0
    variance: float = 0.0
    steps: int = 0

    def add(self, rate: float) -> None:
        self.steps += 1
        w = 1.0 / min(self.steps, WINDOW)
        diff = rate - self.mean
        self.mean += w * diff
        self.variance = (1.0 - w) * (self.variance + w * diff * diff)

    @property
    def squared_error(self) -> float:
        """The mean's squared standard error (an exponential mean's effective count: (2 - w) / w)."""
        if self.steps < WINDOW:
            return self.variance / self.steps if self.steps else 0.0
        w = 1.0 / WINDOW
        return self.variance * w / (2.0 - w)


@dataclass
class _Regime:
    """The verdict for a batch regime (1, 2-3, 4-7, 8-15, ... decodes): the batch size moves within
    one as requests finish and join, and a verdict per exact size was drawn again and again."""

    drafting: _Average = field(default_factory=_Average)  # tokens/s over plain's at the step's size
    since_plain: int = 0  # drafting steps since the last plain one
    wait: int = 0  # plain steps still to run before drafting is tried again
    next_wait: int = FIRST_WAIT
    warm_up: bool = False  # the next drafting step follows a wait: not counted
    idle: bool = False  # the last drafting step gained next to nothing: a plain step now costs little
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
    _plain: dict[int, _Average] = field(default_factory=dict)  # by exact batch size

    def drafts(self, request_ids: Collection[str]) -> bool:
        """Whether a step decoding these requests asks the drafter; counts a step it does not."""
        asks = self._asks(len(request_ids), frozenset(request_ids))
        if not asks:
            self.left_out_steps += 1
        return asks

    def observe(self, batch_size: int, drafted: bool, tokens: int, seconds: float) -> None:
        """A decode step's outcome: whether it asked the drafter, the tokens it committed over its
        requests, its wall time."""
        if not self.policy.adaptive or batch_size < 1 or tokens < 1 or not seconds > 0.0:
            return
        record = self._regimes.setdefault(regime(batch_size), _Regime())
        plain = self._plain.setdefault(batch_size, _Average())
        if not drafted:
            plain.add(tokens / seconds)
            record.since_plain, record.idle = 0, False
            _judge(record, plain)
            return
        record.since_plain += 1
        record.idle = tokens - batch_size <= batch_size // IDLE_REQUESTS
        if record.warm_up:
            record.warm_up = False
        elif plain.steps >= PLAIN_FIRST:
            record.drafting.add(tokens / seconds / plain.mean)
            _judge(record, plain)

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
        record.batch = batch
        if record.wait > 0 and record.judged.isdisjoint(batch):  # other requests now: a try for them
            record.wait, record.warm_up = 0, True
        if record.wait > 0:
            record.wait -= 1
            record.warm_up = record.wait == 0
            return False
        plain = self._plain.get(batch_size)
        if plain is None or plain.steps < PLAIN_FIRST:
            wants_plain = True
        else:
            stale = record.since_plain >= PLAIN_EVERY
            wants_plain = stale and record.drafting.mean < PLAIN_NEAR
        return not (wants_plain and (record.idle or record.since_plain >= OVERDUE))


def _judge(record: _Regime, plain: _Average) -> None:
    """Leave drafting out for the next wait if it runs slower than plain beyond the noise; a try that
    pays resets the waits."""
    if record.drafting.steps < MIN_STEPS or plain.steps < PLAIN_FIRST:
        return
    if _slower(record.drafting, plain):
        record.wait, record.next_wait = record.next_wait, min(2 * record.next_wait, MAX_WAIT)
        record.drafting, record.judged = _Average(), record.batch
    elif record.drafting.steps == MIN_STEPS:
        record.next_wait = FIRST_WAIT


def _slower(drafting: _Average, plain: _Average) -> bool:
    """Whether drafting (its speed relative to plain's) runs slower than plain by more than the
    margin, beyond the noise of both averages."""
    shortfall = 1.0 - MARGIN - drafting.mean
    noise = drafting.squared_error + plain.squared_error / (plain.mean * plain.mean)
    return shortfall > 0.0 and shortfall * shortfall > Z * Z * noise

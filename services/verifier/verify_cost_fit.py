"""The verify cost, kept current from the engine's own decode steps.

The start-up probe (verify_cost.py) times forwards on an idle device. While serving, the machine's load
and the contexts being served change what a row costs: on a shared CPU, memory contention slowed the
one-row forward far more than the extra rows (the benches measured a node cost of 0.010 on a busy
machine, 0.074 on a quiet one). So every decode step (one without a prefill chunk) is an observation:
its rows (decode tokens plus draft nodes) and its seconds (forward and verification). A least-squares
line through the recent observations, weighted by age (a half-life in steps), gives the fixed part of a
step and the part per row, once the row counts seen vary enough to tell the two apart. Until then, and
whenever they stop varying (drafts left out, every step one row), the probe's split stands, scaled to
the observed step times: a uniform slowdown leaves the node cost as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from treespec.verifier.verify_cost import VerifyCost

HALF_LIFE_STEPS = 256.0  # an observation's weight halves after this many later ones
MIN_WEIGHT = 16.0  # (age-weighted) observations before they replace the probe's figures
MIN_ROW_SPREAD = 0.25  # weighted variance of the row counts below which the slope is not trusted


@dataclass
class _Moments:
    """Age-weighted sums over observations (rows x, seconds y)."""

    w: float = 0.0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    xy: float = 0.0

    def add(self, x: float, y: float, decay: float) -> None:
        self.w = self.w * decay + 1.0
        self.x = self.x * decay + x
        self.y = self.y * decay + y
        self.xx = self.xx * decay + x * x
        self.xy = self.xy * decay + x * y


@dataclass
class OnlineVerifyCost:
    prior: VerifyCost  # the start-up probe's
    half_life: float = HALF_LIFE_STEPS
    observations: int = 0
    _m: _Moments = field(default_factory=_Moments)

    def observe(self, rows: int, seconds: float) -> None:
        """One decode step: how many rows its forward had, and how long it took."""
        if rows < 1 or not seconds > 0.0:
            return
        self._m.add(float(rows), seconds, 0.5 ** (1.0 / self.half_life))
        self.observations += 1

    @property
    def current(self) -> VerifyCost:
        m = self._m
        if m.w < MIN_WEIGHT:
            return self.prior
        mean_x, mean_y = m.x / m.w, m.y / m.w
        spread = m.xx / m.w - mean_x * mean_x
        if spread < MIN_ROW_SPREAD:
            expected = self.prior.step_s + (mean_x - 1.0) * self.prior.row_s
            scale = mean_y / expected if expected > 0.0 else 1.0
            return VerifyCost(self.prior.step_s * scale, self.prior.row_s * scale)
        row = max(0.0, (m.xy / m.w - mean_x * mean_y) / spread)
        step = mean_y - row * (mean_x - 1.0)  # the line at one row
        return VerifyCost(step, row) if step > 0.0 else self.prior

    def node_cost(self, batch_size: int) -> float:
        return self.current.node_cost(batch_size)

"""The verify cost, kept current from the engine's own decode steps.

The start-up probe (verify_cost.py) times forwards on an idle device. While serving, the machine's load
and the contexts being served change what a row costs: on a shared CPU, memory contention slowed the
one-row forward far more than the extra rows (the benches measured a node cost of 0.010 on a busy
machine, 0.074 on a quiet one), and a longer context makes a tree's first extra row dearer. So every
decode step (one without a prefill chunk) is an observation: its rows (decode tokens plus draft
nodes), its trees (requests verifying draft nodes) and its seconds (forward and verification). A
least-squares plane through the recent observations, weighted by age (a half-life in steps), gives
the fixed part of a step, the part per row and the part per tree, once the counts seen vary enough to
tell them apart. Until then, and whenever they stop varying (drafts left out, every step one row),
the probe's split stands, scaled to the observed step times: a uniform slowdown leaves the costs as
they were. When the rows vary but the trees do not (a drafter that always drafts), the probe's part
per tree, so scaled, stands and the rest is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from treespec.verifier.verify_cost import VerifyCost

HALF_LIFE_STEPS = 256.0  # an observation's weight halves after this many later ones
MIN_WEIGHT = 16.0  # (age-weighted) observations before they replace the probe's figures
MIN_ROW_SPREAD = 0.25  # weighted variance of the row counts below which the slope is not trusted
MIN_TREE_SPREAD = 0.05  # the same for the tree counts (at batch 1: trees in 5% to 95% of steps)
MAX_CORRELATION = 0.95  # squared correlation of rows and trees above which they are not told apart


@dataclass
class _Moments:
    """Age-weighted sums over observations (rows x, trees z, seconds y)."""

    w: float = 0.0
    x: float = 0.0
    z: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    zz: float = 0.0
    xz: float = 0.0
    xy: float = 0.0
    zy: float = 0.0

    def add(self, x: float, z: float, y: float, decay: float) -> None:
        for name, value in (
            ("w", 1.0),
            ("x", x),
            ("z", z),
            ("y", y),
            ("xx", x * x),
            ("zz", z * z),
            ("xz", x * z),
            ("xy", x * y),
            ("zy", z * y),
        ):
            setattr(self, name, getattr(self, name) * decay + value)

    def mean(self, name: str) -> float:
        return float(getattr(self, name)) / self.w

    def cov(self, a: str, b: str) -> float:
        return self.mean(a + b) - self.mean(a) * self.mean(b)


@dataclass
class OnlineVerifyCost:
    prior: VerifyCost  # the start-up probe's
    half_life: float = HALF_LIFE_STEPS
    observations: int = 0
    _m: _Moments = field(default_factory=_Moments)

    def observe(self, rows: int, seconds: float, trees: int = 0) -> None:
        """One decode step: how many rows its forward had, how many of its requests verified a tree,
        and how long it took."""
        if rows < 1 or trees < 0 or not seconds > 0.0:
            return
        self._m.add(float(rows), float(trees), seconds, 0.5 ** (1.0 / self.half_life))
        self.observations += 1

    @property
    def current(self) -> VerifyCost:
        m = self._m
        if m.w < MIN_WEIGHT:
            return self.prior
        if m.cov("x", "x") < MIN_ROW_SPREAD:
            return self._scaled_prior()
        fitted = self._fit_rows_and_trees() or self._fit_rows()
        return fitted if fitted.step_s > 0.0 else self.prior

    def node_cost(self, batch_size: int) -> float:
        return self.current.node_cost(batch_size)

    def tree_cost(self, batch_size: int) -> float:
        return self.current.tree_cost(batch_size)

    def _scale(self) -> float:
        """Observed over expected seconds per step, by the probe's figures."""
        p, m = self.prior, self._m
        expected = p.step_s + (m.mean("x") - 1.0) * p.row_s + m.mean("z") * p.tree_s
        return m.mean("y") / expected if expected > 0.0 else 1.0

    def _scaled_prior(self) -> VerifyCost:
        s, p = self._scale(), self.prior
        return VerifyCost(p.step_s * s, p.row_s * s, p.tree_s * s)

    def _fit_rows(self) -> VerifyCost:
        """The line through rows, with the probe's (scaled) part per tree taken out first."""
        m = self._m
        tree = self.prior.tree_s * self._scale()
        row = max(0.0, (m.cov("x", "y") - tree * m.cov("x", "z")) / m.cov("x", "x"))
        return self._through_means(row, tree)

    def _fit_rows_and_trees(self) -> VerifyCost | None:
        """The plane through rows and trees; None when the trees do not vary, or vary with the rows."""
        m = self._m
        sxx, szz, sxz = m.cov("x", "x"), m.cov("z", "z"), m.cov("x", "z")
        if szz < MIN_TREE_SPREAD or sxz * sxz > MAX_CORRELATION * sxx * szz:
            return None
        sxy, szy = m.cov("x", "y"), m.cov("z", "y")
        det = sxx * szz - sxz * sxz
        row = (sxy * szz - szy * sxz) / det
        tree = (szy * sxx - sxy * sxz) / det
        if tree < 0.0:  # clamp, then the best row part alone
            tree, row = 0.0, sxy / sxx
        if row < 0.0:
            row, tree = 0.0, max(0.0, szy / szz)
        return self._through_means(max(0.0, row), tree)

    def _through_means(self, row: float, tree: float) -> VerifyCost:
        m = self._m
        step = m.mean("y") - row * (m.mean("x") - 1.0) - tree * m.mean("z")  # the plane at one row
        return VerifyCost(step, row, tree)

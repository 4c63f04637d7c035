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

The plane's one-row step is an extrapolation where steps of one row are rare (a drafter that always
drafts): there the rows vary only with the batch, and each further request brings costs of its own
besides its rows, which the line then charges to the rows, so its one-row step fell to a third of
the probe's, and a node's cost relative to it rose to 1.0 at worst, a tree's to 2.4 (the service
tests' decode steps replayed: in 152 of 2,350 no chain of a 0.8 acceptance rate was worth verifying,
and a predicted output drafted nothing). A one-row forward is no faster on a busy device than on the
idle one the probe timed, so the fitted step is held at MIN_STEP_OF_PROBE of the probe's at least
(some slack for a probe context longer than the requests'), and the parts per row and per tree are
then fitted through that point. A probe that was itself slowed (under two busy processes on two
cores it timed one row at 1.16 s) would pin the step far above the steps served and leave nothing
for the rows; no step of one row or more is faster than one of one row, so the floor is taken from
the fastest step seen where that is faster.

One plane is a poor fit across batch sizes: a batch's steps charge the rows with the requests' own
costs, and after a burst of 16 requests at once a single request was priced at twice the node cost
it had before the burst (`treespec bench burst`: 0.42-0.47 against 0.20-0.24), for the few hundred
steps the half-life took to forget it, while the burst's steps were priced by a plane leaning on the
smaller batches (0.91-0.93 at 16, against 0.39-0.62 from their own steps). So each batch regime (1,
2-3, 4-7, 8-15, ... decodes) keeps a plane of its own steps, which ages only with them: a step of a
given batch is priced from its regime's plane once that has seen enough steps, and from the plane
through every step until then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from treespec.verifier.verify_cost import VerifyCost

HALF_LIFE_STEPS = 256.0  # an observation's weight halves after this many later ones
MIN_WEIGHT = 16.0  # (age-weighted) observations before they replace the probe's figures
MIN_ROW_SPREAD = 0.25  # weighted variance of the row counts below which the slope is not trusted
MIN_TREE_SPREAD = 0.05  # the same for the tree counts (at batch 1: trees in 5% to 95% of steps)
MAX_CORRELATION = 0.95  # squared correlation of rows and trees above which they are not told apart
MIN_STEP_OF_PROBE = 0.8  # the fitted one-row step is at least this share of the probe's (or fastest step)


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
        return self.about(a, b, self.means())

    def about(self, a: str, b: str, centre: Mapping[str, float]) -> float:
        """The mean of (a - centre[a]) * (b - centre[b]): cov(a, b) where the centre is the means."""
        ca, cb = centre[a], centre[b]
        return self.mean(a + b) - cb * self.mean(a) - ca * self.mean(b) + ca * cb

    def means(self) -> dict[str, float]:
        return {name: self.mean(name) for name in ("x", "z", "y")}


def regime(batch_size: int) -> int:
    """The batch regime a step of `batch_size` decodes belongs to: 1, 2-3, 4-7, 8-15, ..."""
    return max(1, batch_size).bit_length()


@dataclass
class OnlineVerifyCost:
    prior: VerifyCost  # the start-up probe's
    half_life: float = HALF_LIFE_STEPS
    observations: int = 0
    fastest_s: float = float("inf")  # the fastest step seen: no one-row step takes longer
    _m: _Moments = field(default_factory=_Moments)  # every step's
    _regimes: dict[int, _Moments] = field(default_factory=dict)  # each batch regime's steps alone

    def observe(self, rows: int, seconds: float, trees: int = 0, batch_size: int = 1) -> None:
        """One decode step: how many rows its forward had, how many of its requests verified a tree,
        how long it took, and how many requests it decoded."""
        if rows < 1 or trees < 0 or not seconds > 0.0:
            return
        decay = 0.5 ** (1.0 / self.half_life)
        own = self._regimes.setdefault(regime(batch_size), _Moments())
        for moments in (self._m, own):
            moments.add(float(rows), float(trees), seconds, decay)
        self.observations += 1
        self.fastest_s = min(self.fastest_s, seconds)

    def at(self, batch_size: int) -> VerifyCost:
        """The costs for a step of `batch_size` decodes: fitted from the steps of its batch regime
        alone once there are enough of them (a regime's own figures outlast a spell of other batch
        sizes), else from every step."""
        own = self._regimes.get(regime(batch_size))
        return self._solve(own if own is not None and own.w >= MIN_WEIGHT else self._m)

    def node_cost(self, batch_size: int) -> float:
        return self.at(batch_size).node_cost(batch_size)

    def tree_cost(self, batch_size: int) -> float:
        return self.at(batch_size).tree_cost(batch_size)

    def _solve(self, m: _Moments) -> VerifyCost:
        if m.w < MIN_WEIGHT:
            return self.prior
        if m.cov("x", "x") < MIN_ROW_SPREAD:
            return self._scaled_prior(m)
        row, tree = self._plane(m, m.means())
        step = m.mean("y") - row * (m.mean("x") - 1.0) - tree * m.mean("z")  # the plane at one row
        floor = MIN_STEP_OF_PROBE * min(self.prior.step_s, self.fastest_s)
        if step < floor:  # extrapolated below what one row costs: through the floor at one row instead
            step = floor
            row, tree = self._plane(m, {"x": 1.0, "z": 0.0, "y": floor})
        return VerifyCost(step, row, tree)

    def _scale(self, m: _Moments) -> float:
        """Observed over expected seconds per step, by the probe's figures."""
        p = self.prior
        expected = p.step_s + (m.mean("x") - 1.0) * p.row_s + m.mean("z") * p.tree_s
        return m.mean("y") / expected if expected > 0.0 else 1.0

    def _scaled_prior(self, m: _Moments) -> VerifyCost:
        s, p = self._scale(m), self.prior
        return VerifyCost(p.step_s * s, p.row_s * s, p.tree_s * s)

    def _plane(self, m: _Moments, centre: Mapping[str, float]) -> tuple[float, float]:
        """(part per row, part per tree): the least-squares plane of the seconds over rows and trees
        through `centre` (the means: the plane that fits best; one row, no tree and a given step: the
        best with that step). Where the trees do not vary apart from the rows, the probe's part per
        tree (scaled) stands and the rows' is fitted."""
        sxx, szz, sxz = (m.about(a, b, centre) for a, b in (("x", "x"), ("z", "z"), ("x", "z")))
        sxy, szy = m.about("x", "y", centre), m.about("z", "y", centre)
        if szz < MIN_TREE_SPREAD or sxz * sxz > MAX_CORRELATION * sxx * szz:
            tree = self.prior.tree_s * self._scale(m)
            return max(0.0, (sxy - tree * sxz) / sxx), tree
        det = sxx * szz - sxz * sxz
        row = (sxy * szz - szy * sxz) / det
        tree = (szy * sxx - sxy * sxz) / det
        if tree < 0.0:  # clamp, then the best row part alone
            tree, row = 0.0, sxy / sxx
        if row < 0.0:
            row, tree = 0.0, max(0.0, szy / szz)
        return max(0.0, row), tree

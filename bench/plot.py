"""A benchmark's tokens/s as a PNG: one group of bars per category (and one for the whole run), one bar
per method, from the same payload the JSON holds (`--plot PATH` on the per-category bench verbs).

matplotlib is optional (`pip install treespec[plots]`): it is imported only when a plot is asked for,
and `check_plotting` says before a run that it is missing, rather than after an hour of measuring.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TPS_SUFFIX = "_tps"
OVERALL = "overall"
# The figure's width grows with its bars, within what a page shows.
BAR_IN, MARGIN_IN, MIN_WIDTH_IN, MAX_WIDTH_IN = 0.25, 1.5, 6.0, 16.0


class PlotError(ValueError):
    """A plot was asked for and cannot be drawn (no matplotlib, or no per-category figures)."""


@dataclass(frozen=True)
class TpsSeries:
    """Tokens/s per group (the categories, then "overall"), for each method (a `*_tps` key)."""

    groups: tuple[str, ...]
    methods: dict[str, tuple[float, ...]]  # key without "_tps" -> one value per group


def tps_series(payload: Mapping[str, Any]) -> TpsSeries:
    """The `*_tps` figures that the whole run and every category report, in the payload's order."""
    categories: Mapping[str, Mapping[str, Any]] = payload.get("per_category") or {}
    if not categories:
        raise PlotError("the benchmark reported no per-category figures to plot")
    rows = [*categories.values(), payload]
    keys = [k for k in payload if k.endswith(TPS_SUFFIX) and all(_number(r.get(k)) for r in rows)]
    if not keys:
        raise PlotError("the benchmark reported no tokens/s to plot")
    methods = {k.removesuffix(TPS_SUFFIX): tuple(float(r[k]) for r in rows) for k in keys}
    return TpsSeries((*categories, OVERALL), methods)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_plotting() -> None:
    """Raises PlotError where matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise PlotError("--plot needs matplotlib: pip install 'treespec[plots]'") from exc


def write_plot(path: Path, payload: Mapping[str, Any], title: str) -> None:
    """Grouped bars of `tps_series(payload)` to a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    from matplotlib import pyplot

    series = tps_series(payload)
    count = len(series.methods)
    width = 0.8 / count
    inches = min(MAX_WIDTH_IN, max(MIN_WIDTH_IN, BAR_IN * len(series.groups) * count + MARGIN_IN))
    figure, axes = pyplot.subplots(figsize=(inches, 4.5))
    try:
        for k, (method, values) in enumerate(series.methods.items()):
            positions = [g + (k - (count - 1) / 2) * width for g in range(len(series.groups))]
            axes.bar(positions, values, width, label=method)
        axes.set_xticks(range(len(series.groups)), series.groups, rotation=30, ha="right")
        axes.set_ylabel("tokens/s")
        axes.set_title(title)
        axes.legend(fontsize="small")
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, format="png", dpi=120)
    finally:
        pyplot.close(figure)

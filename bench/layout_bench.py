"""`treespec bench layout`: a forward of a few rows in each CPU weight layout, side by side.

The model is loaded four times: with the panel kernel (the default where it builds; each weight in the
narrowest form that holds it exactly, kernels/exact_blocks.py), with the panel kernel over float32
weights as they load (`panels-f32`), with the library layouts (oneDNN's packing, and the dense
weights for the row counts where the load-time probe found them faster: the default where the kernel
does not build), and dense only (torch.mm). The panel model is timed a second time with torch's SDPA
attending the rows instead of the own row attention kernel (kernels/tree_attention.py), which every
other variant uses, and a third time with the Python loop over its layers (`panels-loop`) instead of
the one C++ call that runs them where the model and the step allow it (shared/model/layer_run.py).
Each forward is a verify step's: `rows` new tokens (a chain) after `context` cached ones, logits for
every row. The variants take turns within each repeat, so that a change in the machine's load hits
all of them; the median counts. The cost of a row beyond the first, as a share of the one-row
forward, is what a draft node costs to verify (TreeBudget.node_cost).
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from treespec.bench import runs
from treespec.bench.report import format_table
from treespec.kernels.panel_gemm import PanelWeight
from treespec.shared.model.attention.torch_backend import TorchAttentionBackend
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.forward_timing import time_forward
from treespec.shared.model.kv_cache import KVCache
from treespec.shared.model.loader import LoadOptions, load_model
from treespec.shared.model.store import models_dir, resolve_model_path

LAYOUTS = {
    "panels": LoadOptions(),
    "panels-f32": LoadOptions(exact_forms=False),
    "library": LoadOptions(panel_weights=False),
    "dense": LoadOptions(pack_weights=False),
}
# Each timed variant: (weight layout, the own row attention kernel or SDPA for the forward's rows, the
# layers in one C++ call where they allow it or the Python loop: shared/model/layer_run.py).
VARIANTS = {
    "panels": ("panels", True, True),
    "panels-loop": ("panels", True, False),
    "panels-f32": ("panels-f32", True, True),
    "sdpa": ("panels", False, True),
    "library": ("library", True, True),
    "dense": ("dense", True, True),
}
BLOCK = 16


@dataclass(frozen=True)
class LayoutBenchArgs:
    model: Path
    rows: tuple[int, ...]
    context: int
    repeats: int
    threads: int
    json_path: Path | None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> LayoutBenchArgs:
        try:
            rows = tuple(sorted({int(r) for r in ns.rows.split(",")}))
        except ValueError:
            rows = ()
        if not rows or rows[0] < 1:
            raise ValueError(f"--rows: positive row counts, comma-separated (got {ns.rows!r})")
        return cls(
            model=resolve_model_path(ns.model, models_dir()),
            rows=rows,
            context=ns.context,
            repeats=ns.repeats,
            threads=ns.threads or torch.get_num_threads(),
            json_path=Path(ns.json) if ns.json else None,
        )


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("layout", ns, LayoutBenchArgs, bench_layout, render)


def bench_layout(args: LayoutBenchArgs) -> dict[str, Any]:
    models = {name: load_model(args.model, options) for name, options in LAYOUTS.items()}
    kinds = {name: _layout_kind(models[layout]) for name, (layout, _, _) in VARIANTS.items()}
    caches = {name: _cache(model, args.context + max(args.rows)) for name, model in models.items()}
    window = next(iter(models.values())).config.sliding_window
    backends = {name: TorchAttentionBackend(window, variant[1]) for name, variant in VARIANTS.items()}
    times: dict[str, dict[int, list[float]]] = {name: {r: [] for r in args.rows} for name in VARIANTS}
    for repeat in range(args.repeats + 1):
        for rows in args.rows:
            for name, (layout, _, fused) in VARIANTS.items():
                models[layout].fused_layers = fused
                t = time_forward(models[layout], backends[name], caches[layout], args.context, rows)
                models[layout].fused_layers = True
                if repeat > 0:  # the first round warms up
                    times[name][rows].append(t)
    ms = {
        name: {r: 1e3 * statistics.median(ts) for r, ts in by_rows.items()} for name, by_rows in times.items()
    }
    return {
        "forward_ms": {
            name: {str(r): round(v, 3) for r, v in by_rows.items()} for name, by_rows in ms.items()
        },
        "row_cost": {name: _row_cost(by_rows) for name, by_rows in ms.items()},
        "layouts": kinds,
        "setup": {
            "model": str(args.model),
            "context": args.context,
            "repeats": args.repeats,
            "torch_threads": args.threads,
            "torch": torch.__version__,
            "cpu_count": runs.cpu_count(),
        },
    }


def _cache(model: CausalLM, tokens: int) -> KVCache:
    return KVCache.allocate(model.config, -(-tokens // BLOCK) + 1, BLOCK, model.dtype, model.device)


def _layout_kind(model: CausalLM) -> str:
    """What the first layer's first matmul weight turned into (panels: with their dtype)."""
    weight = model.weights.layers[0].matmuls()[0]
    if isinstance(weight, PanelWeight):
        return f"PanelWeight[{str(weight.panels.dtype).removeprefix('torch.')}]"
    if not isinstance(weight, torch.Tensor):
        return type(weight).__name__
    return "mkldnn" if weight.is_mkldnn else "dense"


def _row_cost(by_rows: dict[int, float]) -> dict[str, float]:
    """Each row count's extra time over one row, per extra row, as a share of the one-row forward."""
    one = by_rows.get(1)
    if one is None:
        return {}
    return {str(r): round((t - one) / (r - 1) / one, 4) for r, t in by_rows.items() if r > 1}


def render(p: dict[str, Any]) -> str:
    names = list(p["forward_ms"])
    rows = sorted({int(r) for by_rows in p["forward_ms"].values() for r in by_rows})
    header = ["rows", *(f"{n} ms" for n in names), *(f"{n}/panels" for n in names if n != "panels")]
    body = []
    for r in rows:
        ms = [p["forward_ms"][n][str(r)] for n in names]
        base = p["forward_ms"]["panels"][str(r)]
        body.append([r, *ms, *(p["forward_ms"][n][str(r)] / base for n in names if n != "panels")])
    layouts = ", ".join(f"{n}: {k}" for n, k in p["layouts"].items())
    return "\n".join(
        [
            format_table(header, body),
            "",
            f"a forward of N rows after {p['setup']['context']} cached tokens; layer weights as {layouts};"
            " attention of the rows by the own row kernel, except sdpa: torch's SDPA; the layers in one"
            " C++ call where they allow it, except panels-loop: the Python loop over them",
        ]
    )

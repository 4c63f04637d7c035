"""`treespec bench prefill`: a prompt's prefill with the own prefill attention kernel and with SDPA.

A prompt of N tokens goes through the model's forward in chunks of `--chunk` tokens, as the engine
prefills it (each chunk after the ones before it, cached), logits for the last row of each chunk. The
same model is timed with its prefill chunks attended by the own kernel (kernels/prefill_attention.py,
the default where it builds) and by torch's SDPA; decode and tree rows go to the row attention kernel
in both. The two take turns within each repeat, so that a change in the machine's load hits both; the
median counts. What the prompt says does not matter to the time: its tokens are drawn at random.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from treespec.bench import runs
from treespec.bench.report import format_table
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.attention.torch_backend import TorchAttentionBackend
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.kv_cache import KVCache
from treespec.shared.model.loader import load_model
from treespec.shared.model.store import models_dir, resolve_model_path
from treespec.verifier.config import EngineConfig

BLOCK = 16
VARIANTS = ("kernel", "sdpa")  # the prefill chunks' attention: the own kernel, or torch's SDPA


@dataclass(frozen=True)
class PrefillBenchArgs:
    model: Path
    tokens: tuple[int, ...]
    chunk: int
    repeats: int
    threads: int
    json_path: Path | None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> PrefillBenchArgs:
        try:
            tokens = tuple(sorted({int(t) for t in ns.tokens.split(",")}))
        except ValueError:
            tokens = ()
        if not tokens or tokens[0] < 1:
            raise ValueError(f"--tokens: positive prompt lengths, comma-separated (got {ns.tokens!r})")
        return cls(
            model=resolve_model_path(ns.model, models_dir()),
            tokens=tokens,
            chunk=ns.chunk or EngineConfig.chunked_prefill_size,
            repeats=ns.repeats,
            threads=ns.threads or torch.get_num_threads(),
            json_path=Path(ns.json) if ns.json else None,
        )


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("prefill", ns, PrefillBenchArgs, bench_prefill, render)


def bench_prefill(args: PrefillBenchArgs) -> dict[str, Any]:
    model = load_model(args.model)
    window = model.config.sliding_window
    backends = {name: TorchAttentionBackend(window, prefill_kernel=name == "kernel") for name in VARIANTS}
    cache = KVCache.allocate(
        model.config, -(-max(args.tokens) // BLOCK) + 1, BLOCK, model.dtype, model.device
    )
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.config.vocab_size, (max(args.tokens),), generator=generator)
    times: dict[str, dict[int, list[float]]] = {name: {n: [] for n in args.tokens} for name in VARIANTS}
    for repeat in range(args.repeats + 1):
        for n in args.tokens:
            for name in VARIANTS:
                t = time_prefill(model, backends[name], cache, prompt[:n].to(model.device), args.chunk)
                if repeat > 0:  # the first round warms up
                    times[name][n].append(t)
    ms = {name: {n: 1e3 * statistics.median(ts) for n, ts in by_n.items()} for name, by_n in times.items()}
    return {
        "prefill_ms": {name: {str(n): round(v, 2) for n, v in by_n.items()} for name, by_n in ms.items()},
        "tokens_per_s": {
            name: {str(n): round(n / (v / 1e3), 1) for n, v in by_n.items()} for name, by_n in ms.items()
        },
        "sdpa_over_kernel": {str(n): round(ms["sdpa"][n] / ms["kernel"][n], 3) for n in args.tokens},
        "setup": {
            "model": str(args.model),
            "chunk": args.chunk,
            "repeats": args.repeats,
            "torch_threads": args.threads,
            "torch": torch.__version__,
            "cpu_count": runs.cpu_count(),
        },
    }


def time_prefill(
    model: CausalLM, backend: TorchAttentionBackend, cache: KVCache, prompt: torch.Tensor, chunk: int
) -> float:
    """Seconds to prefill `prompt` in chunks from slot 0 (each chunk's K/V cached for the next)."""
    start = time.perf_counter()
    for first in range(0, prompt.shape[0], chunk):
        n = min(chunk, prompt.shape[0] - first)
        layout = BatchLayout([SequenceLayout(first, torch.arange(first + n), torch.arange(first, first + n))])
        plan = backend.plan(layout, model.device)
        last = torch.tensor([n - 1], device=model.device)
        model.forward(
            prompt[first : first + n], layout.positions().to(model.device), backend, plan, cache, last
        )
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)
    return time.perf_counter() - start


def render(p: dict[str, Any]) -> str:
    lengths = sorted(int(n) for n in p["prefill_ms"]["kernel"])
    header = ["tokens", "kernel ms", "sdpa ms", "sdpa/kernel", "kernel tok/s", "sdpa tok/s"]
    body = [
        [
            n,
            p["prefill_ms"]["kernel"][str(n)],
            p["prefill_ms"]["sdpa"][str(n)],
            p["sdpa_over_kernel"][str(n)],
            p["tokens_per_s"]["kernel"][str(n)],
            p["tokens_per_s"]["sdpa"][str(n)],
        ]
        for n in lengths
    ]
    return "\n".join(
        [
            format_table(header, body),
            "",
            f"a prompt of N tokens prefilled in chunks of {p['setup']['chunk']}; its chunks attended by"
            " the own prefill kernel, or by torch's SDPA",
        ]
    )

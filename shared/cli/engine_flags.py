"""The verifier engine's flags: SGLang's names, with vLLM's as aliases (`--max-model-len`,
`--max-num-seqs`, `--max-num-batched-tokens`). `treespec verifier` reads them into its EngineConfig;
`treespec serve` takes the same flags and hands them on to the verifier it starts."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Any

from treespec.shared.cli.arg_types import positive_int

DEFAULT_DEVICE = "cpu"
DEFAULT_DTYPE = "auto"
SWITCHES = ("prefix_caching", "exact_weight_forms", "adaptive_speculation")  # on unless --disable-...


@dataclass(frozen=True)
class EngineFlags:
    """The flags as given; None (and the defaults here): the engine's own default."""

    device: str = DEFAULT_DEVICE
    dtype: str = DEFAULT_DTYPE
    page_size: int | None = None
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    context_length: int | None = None
    prefix_caching: bool = True
    exact_weight_forms: bool = True
    scheduling_policy: str | None = None
    prediction_draft_tokens: int | None = None
    adaptive_speculation: bool = True
    speculative_disable_by_batch_size: int | None = None

    @classmethod
    def of(cls, ns: argparse.Namespace) -> EngineFlags:
        values: dict[str, Any] = {f.name: getattr(ns, f.name) for f in fields(cls) if f.name not in SWITCHES}
        values.update({name: not getattr(ns, f"disable_{name}") for name in SWITCHES})
        return cls(**values)

    def engine_fields(self) -> dict[str, Any]:
        """EngineConfig's fields that the flags set."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def argv(self) -> list[str]:
        """The flags as a command line (what differs from the defaults)."""
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in SWITCHES:
                argv += [] if value else [f"--disable-{f.name.replace('_', '-')}"]
            elif value is not None and value != f.default:
                argv += [f"--{f.name.replace('_', '-')}", str(value)]
        return argv


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=DEFAULT_DEVICE, help="torch device (default: cpu)")
    p.add_argument(
        "--dtype", default=DEFAULT_DTYPE, help="auto (float32 on CPU, bfloat16 on GPU), float32, ..."
    )
    p.add_argument("--page-size", type=positive_int, help="tokens per KV block (default: 16)")
    p.add_argument(
        "--max-total-tokens", type=positive_int, help="KV cache capacity in tokens (default: 32768)"
    )
    p.add_argument(
        "--max-running-requests",
        "--max-num-seqs",
        dest="max_running_requests",
        type=positive_int,
        help="requests decoded together (default: 64)",
    )
    p.add_argument(
        "--chunked-prefill-size",
        "--max-num-batched-tokens",
        dest="chunked_prefill_size",
        type=positive_int,
        help="prompt tokens per engine step, over all requests (default: 512)",
    )
    p.add_argument(
        "--context-length",
        "--max-model-len",
        dest="context_length",
        type=positive_int,
        help="the longest prompt plus output (default: the model's)",
    )
    p.add_argument(
        "--disable-prefix-caching",
        "--disable-radix-cache",
        action="store_true",
        help="compute every prompt from its start (default: reuse the K/V of cached prompt prefixes, "
        "and for an EAGLE drafter the target's features there too)",
    )
    p.add_argument(
        "--disable-exact-weight-forms",
        action="store_true",
        help="keep the CPU weights in the model's dtype (default: each in the narrowest form that holds "
        "it exactly, such as a GGUF import's 4-bit blocks: the same outputs from fewer bytes a step)",
    )
    p.add_argument(
        "--scheduling-policy",
        choices=("fcfs", "priority"),
        default=None,
        help="vLLM's: fcfs (first come, first served; the default) or priority (requests' priority "
        "field first: lower values are admitted first and preempted last)",
    )
    p.add_argument(
        "--prediction-draft-tokens",
        type=positive_int,
        default=None,
        help="the most rows (root included) a chain drafted from a request's predicted output "
        "(OpenAI's prediction) verifies; 1: predictions are not drafted from (default: 32)",
    )
    p.add_argument(
        "--disable-adaptive-speculation",
        action="store_true",
        help="ask the drafter every step (default: at each batch size the verifier measures decoding "
        "with and without drafts, and leaves drafting out of steps where it runs slower)",
    )
    p.add_argument(
        "--speculative-disable-by-batch-size",
        type=positive_int,
        default=None,
        help="vLLM's: steps that decode this many requests or more do not draft (default: no limit)",
    )

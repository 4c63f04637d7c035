"""A built CPU kernel serves only if it is not slower than torch's own op on a typical problem.

The kernels are compiled for the CPU they run on (-march=native), so what a machine runs is code that
nobody timed on that machine: a vector idiom that GCC compiles well for one instruction set can turn
into lane-by-lane instructions for another (with AVX-512 the row attention kernel once ran 6x slower
than it had, slower than torch's SDPA; docs/benchmarks.md). So as each kernel loads, one typical
problem is timed with it and with torch's op, in turns, and a kernel slower than torch's op
(`max_slowdown` 1; a kernel may allow more) is left unused, with a warning; torch's path serves.
Where the kernels are right they take a fifth to a half of torch's time on these problems (a 2-core
AMD EPYC with AVX-512, 1 or 2 threads), while the row attention kernel with that pathology took 1.6x
torch's time: the bound separates the two with room for noise.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

MAX_SLOWDOWN = 1.0
ROUNDS = 5  # timed turns of each, after one warm-up call; the medians count
CALLS = 10  # calls per timed turn


def fast_enough(
    name: str,
    kernel: Callable[[], object],
    torch_op: Callable[[], object],
    max_slowdown: float = MAX_SLOWDOWN,
) -> bool:
    """Whether `kernel` takes at most `max_slowdown` times as long as `torch_op` (same problem)."""
    kernel()
    torch_op()
    kernel_s, torch_s = [], []
    for _ in range(ROUNDS):
        kernel_s.append(_time(kernel))
        torch_s.append(_time(torch_op))
    ratio = statistics.median(kernel_s) / max(statistics.median(torch_s), 1e-9)
    if ratio > max_slowdown:
        log.warning(
            "CPU kernel %s takes %.1fx torch's time on this CPU; torch's op serves instead", name, ratio
        )
        return False
    log.info("CPU kernel %s: %.2fx torch's time on a typical problem", name, ratio)
    return True


def _time(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    return time.perf_counter() - start

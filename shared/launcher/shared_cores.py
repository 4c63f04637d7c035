"""OpenMP settings for processes that take turns on the same CPU cores (a verifier and its co-located
drafter process on a CPU).

After each parallel region, libgomp's worker threads spin before they sleep: by default up to 300,000
pause instructions, several milliseconds on recent CPUs. Within a forward the next region comes within
microseconds, so the spinning pays; but a verifier that has finished its forward and waits for its
co-located drafter keeps a core spinning while the drafter's threads need it, and the drafter's workers
do the same to the verifier's next forward. On 2 cores with SmolLM2-135M and the shipped EAGLE-3 head,
a scratch script over 4 bench prompts measured the co-located drafter at 0.82x the in-process one with
the default and 0.92x with 30,000 spins in both processes, while 3,000 slowed every forward;
`treespec bench eagle` gave 0.83x and 0.93x (docs/eagle.md). Rechecked on 2026-11-29 with 5 ms steps:
3,000 spins lifted bench eagle's co-located ratio to 0.92x (from 0.84x) but gained EAGLE3 nothing through
`treespec serve` and slowed its plain decoding by 10-16%, so 30,000 stays (README, Co-location).
"""

from __future__ import annotations

from collections.abc import Mapping

SPIN_COUNT = 30_000
OPENMP_WAIT_VARIABLES = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def shared_core_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What to add to a co-located process's environment: a shorter spin, unless `environ` (the
    user's) already says how OpenMP threads should wait."""
    if any(name in environ for name in OPENMP_WAIT_VARIABLES):
        return {}
    return {"GOMP_SPINCOUNT": str(SPIN_COUNT)}


def openmp_wait(environ: Mapping[str, str]) -> str:
    """How this process's OpenMP threads wait, as `environ` sets it (for benchmark records)."""
    said = [f"{name}={environ[name]}" for name in OPENMP_WAIT_VARIABLES if name in environ]
    return " ".join(said) or "libgomp's default"

"""Building the own CPU kernels (kernels/cpu/*.cpp) with torch's C++ extension loader.

Each kernel is built once per machine on first use (`-O3 -march=native`, seconds), into torch's
extension cache under a name keyed by the source, the flags, the CPU and torch's version, so that a
changed source, another CPU or another torch never loads a stale build. Where it cannot be built (no
C++ compiler or ninja, another architecture) the loader returns None and the caller keeps its torch
path.
"""

from __future__ import annotations

import hashlib
import logging
import platform
from pathlib import Path
from types import ModuleType

import torch

log = logging.getLogger(__name__)

CPU_DIR = Path(__file__).parent / "cpu"
CFLAGS = ("-O3", "-march=native", "-fopenmp")


def on_x86() -> bool:
    """The kernels are written for x86-64 (GCC vector extensions, -march=native)."""
    return platform.machine() in ("x86_64", "AMD64")


def load_cpu_extension(stem: str) -> ModuleType | None:
    """kernels/cpu/<stem>.cpp built (or loaded from torch's cache), or None where it cannot be."""
    if not on_x86():
        return None
    source = CPU_DIR / f"{stem}.cpp"
    try:
        from torch.utils import cpp_extension

        module: ModuleType = cpp_extension.load(
            name=f"treespec_{stem}_{build_key(source)}",
            sources=[str(source)],
            extra_cflags=list(CFLAGS),
            verbose=False,
        )
        return module
    except Exception as exc:  # the caller's torch path still works
        log.warning("CPU kernel %s unavailable (%r); using torch's ops instead", stem, exc)
        return None


def build_key(source: Path) -> str:
    """The source, the flags, this CPU (the build uses -march=native) and torch's version."""
    digest = hashlib.sha256(source.read_bytes())
    for part in (*CFLAGS, _cpu_signature(), torch.__version__):
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def _cpu_signature() -> str:
    """The first processor's model name and flags from /proc/cpuinfo (the machine name elsewhere)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    keys = ("model name", "flags")
    picked = [line for line in lines if line.split(":")[0].strip() in keys]
    return "\n".join(picked[: len(keys)])

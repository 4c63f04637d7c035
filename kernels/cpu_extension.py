"""Building the own CPU kernels (kernels/cpu/*.cpp) with torch's C++ extension loader.

The kernels are one extension, built once per machine on first use (`-O3 -march=native`) into torch's
extension cache, under a name keyed by the sources, the flags, the CPU and torch's version, so that a
changed source, another CPU or another torch never loads a stale build. Its sources compile side by
side (ninja runs a job per core), and only bindings.cpp includes torch's Python bindings, whose
headers cost most of a source's compile time: about a minute on 2 cores, where a kernel of its own,
each with torch/extension.h, took 64 s and 84 s one after the other. Where it cannot be built (no C++
compiler or ninja, another architecture) the loader returns None and the callers keep their torch
paths.
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


def load_cpu_kernels() -> ModuleType | None:
    """The kernels' module (kernels/cpu/kernels.h) built, or loaded from torch's cache; None where it
    cannot be built."""
    if not on_x86():
        return None
    sources = sorted(CPU_DIR.glob("*.cpp"))
    try:
        from torch.utils import cpp_extension

        module: ModuleType = cpp_extension.load(
            name=f"treespec_cpu_kernels_{build_key(sorted(CPU_DIR.glob('*.[ch]*')))}",
            sources=[str(source) for source in sources],
            extra_cflags=list(CFLAGS),
            verbose=False,
        )
        return module
    except Exception as exc:  # the callers' torch paths still work
        log.warning("CPU kernels unavailable (%r); using torch's ops instead", exc)
        return None


def build_key(files: list[Path]) -> str:
    """The sources and header, the flags, this CPU (the build uses -march=native) and torch's version."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
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

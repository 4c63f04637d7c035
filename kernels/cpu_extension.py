"""Building the own CPU kernels (kernels/cpu/*.cpp) with torch's C++ extension loader.

The kernels are one extension, built once per machine on first use (`-O3 -march=native`) into torch's
extension cache, under a name keyed by the sources, the flags, the CPU and torch's version, so that a
changed source, another CPU or another torch never loads a stale build. Its sources compile side by
side (ninja runs a job per core), and only bindings.cpp includes torch's Python bindings, whose
headers cost most of a source's compile time: about a minute on 2 cores, where a kernel of its own,
each with torch/extension.h, took 64 s and 84 s one after the other. Where it cannot be built (no C++
compiler or ninja, another architecture) the loader returns None and the callers keep their torch
paths.

A build holds an advisory lock on its folder (`flock`, which the kernel drops when its process dies)
while it runs, and under it clears torch's own lock file: torch's loader marks a build in progress
with a plain file that a builder killed half-way (Ctrl-C during the first `make serve`, a service
stopped while it starts) leaves behind, and every later load waited on it forever.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import platform
from collections.abc import Iterator
from contextlib import contextmanager
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

        name = extension_name()
        folder = build_folder(name)
        with _building(folder):
            module: ModuleType = cpp_extension.load(
                name=name,
                sources=[str(source) for source in sources],
                extra_cflags=list(CFLAGS),
                build_directory=str(folder),
                verbose=False,
            )
        return module
    except Exception as exc:  # the callers' torch paths still work
        log.warning("CPU kernels unavailable (%r); using torch's ops instead", exc)
        return None


def extension_name() -> str:
    """The extension's name in torch's cache: one per build key, so a stale build is never loaded."""
    return f"treespec_cpu_kernels_{build_key(sorted(CPU_DIR.glob('*.[ch]*')))}"


def build_folder(name: str) -> Path:
    """Where the extension `name` is built: under torch's extension cache (TORCH_EXTENSIONS_DIR)."""
    from torch.utils import cpp_extension

    folder = Path(cpp_extension.get_default_build_root()) / "treespec" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def _building(folder: Path) -> Iterator[None]:
    """This process alone builds or loads in `folder` (others wait); torch's lock file, which nothing
    but a build under this lock makes, is stale here and goes."""
    with (folder / "treespec.flock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            (folder / "lock").unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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

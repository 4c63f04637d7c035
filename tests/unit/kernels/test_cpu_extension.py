"""The CPU kernels' build key: the same sources give the same name in torch's extension cache, and a
changed or added source (the header included) another, so a stale build is never loaded; a build
killed half-way does not stop later loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from treespec.kernels.cpu_extension import (
    CPU_DIR,
    build_folder,
    build_key,
    extension_name,
    load_cpu_kernels,
    on_x86,
)


def test_the_build_key_follows_every_source(tmp_path: Path) -> None:
    source, header = tmp_path / "a.cpp", tmp_path / "a.h"
    source.write_text("int f();")
    header.write_text("#pragma once")
    key = build_key([header, source])
    assert build_key([header, source]) == key and len(key) == 16
    header.write_text("#pragma once\n// changed")
    assert build_key([header, source]) != key
    assert build_key([header, source, tmp_path / "a.h"]) != build_key([header, source])


def test_one_module_holds_every_kernel() -> None:
    # kernels.h declares every entry point; vec_math.h holds the vector math two kernels share.
    assert {path.name for path in CPU_DIR.glob("*.h")} == {"kernels.h", "vec_math.h"}
    if on_x86():
        module = load_cpu_kernels()
        assert module is not None
        assert {
            "pack",
            "matmul",
            "matmul_blocks",
            "attend",
            "prefill_attend",
            "rms_norm",
            "rope",
            "silu_mul",
        } <= set(dir(module))


def test_a_build_killed_half_way_does_not_stop_later_loads() -> None:
    """torch's loader marks a build in progress with a lock file, which a builder killed half-way
    leaves behind (every later load waited on it forever); the next load clears it under its own
    lock, which the kernel drops with the process that held it. Two loads at once: both get the module."""
    assert on_x86(), "the CPU kernels are x86-64 only"
    name = extension_name()
    assert load_cpu_kernels() is not None  # built (or cached) as usual
    (build_folder(name) / "lock").touch()  # what a killed builder leaves
    load = (
        "from treespec.kernels.cpu_extension import load_cpu_kernels; assert load_cpu_kernels() is not None"
    )
    loads = [subprocess.Popen([sys.executable, "-c", load]) for _ in range(2)]
    assert [process.wait(timeout=600) for process in loads] == [0, 0]
    assert not (build_folder(name) / "lock").exists()

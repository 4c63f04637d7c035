"""The CPU kernels' build key: the same sources give the same name in torch's extension cache, and a
changed or added source (the header included) another, so a stale build is never loaded."""

from __future__ import annotations

from pathlib import Path

from treespec.kernels.cpu_extension import CPU_DIR, build_key, load_cpu_kernels, on_x86


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

"""A built kernel far slower than torch's op on this CPU is left unused, with a warning."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from treespec.kernels import panel_gemm, prefill_attention, speed_check, tree_attention


def _sleeper(seconds: float) -> Callable[[], None]:
    return lambda: time.sleep(seconds)


def test_a_kernel_slower_than_torch_fails_the_check(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=speed_check.__name__):
        assert not speed_check.fast_enough("slow", _sleeper(0.003), _sleeper(0.0005))
    assert "slow takes" in caplog.text and "torch's op serves instead" in caplog.text


def test_a_kernel_faster_than_torch_passes_it() -> None:
    assert speed_check.fast_enough("faster", _sleeper(0.0005), _sleeper(0.002))
    assert speed_check.fast_enough("half as slow again", _sleeper(0.0015), _sleeper(0.001), max_slowdown=2.0)


@pytest.mark.parametrize(
    ("module", "load", "build"),
    [
        (tree_attention, tree_attention.tree_attention, tree_attention.build_tree_attention),
        (prefill_attention, prefill_attention.prefill_attention, prefill_attention.build_prefill_attention),
        (panel_gemm, panel_gemm.panel_gemm, panel_gemm.build_panel_gemm),
    ],
    ids=["tree_attention", "prefill_attention", "panel_gemm"],
)
def test_a_kernel_that_fails_the_check_is_not_used(
    module: ModuleType, load: Any, build: Callable[[], object], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert build() is not None  # x86-64 with a compiler, as on CI
    timed: list[str] = []

    def failing(
        name: str, kernel: Callable[[], object], torch_op: Callable[[], object], max_slowdown: float = 1.0
    ) -> bool:
        kernel()  # the typical problem runs in both
        torch_op()
        timed.append(name)
        return False

    monkeypatch.setattr(module, "fast_enough", failing)
    load.cache_clear()
    try:
        assert load() is None
        assert len(timed) == 1
    finally:
        monkeypatch.undo()
        load.cache_clear()  # the next caller checks the kernel again

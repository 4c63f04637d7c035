"""A process freezes its heap once it is ready: what is alive then leaves the collector's scans, and
a benchmark run returns it to the collector when it ends."""

from __future__ import annotations

import gc

from treespec.shared.launcher.heap_freeze import freeze_heap, unfreeze_heap


def _scanned(x: object) -> bool:
    return any(o is x for o in gc.get_objects())


def test_freezing_exempts_what_is_alive_and_unfreezing_returns_it() -> None:
    alive: list[list[int]] = [[i] for i in range(100)]
    assert _scanned(alive)
    try:
        # frozen objects still die by reference count (another thread's, say), so the count only shrinks
        frozen = freeze_heap()
        assert frozen >= len(alive) and 0 < gc.get_freeze_count() <= frozen
        assert not _scanned(alive)
        later: list[int] = []
        assert _scanned(later)  # what is allocated afterwards is collected as before
    finally:
        unfreeze_heap()
    assert gc.get_freeze_count() == 0 and _scanned(alive)

"""Profiler traces of the engine's steps: recorded on the engine thread whichever thread asks,
until stopped or for so many steps, written as Chrome trace JSON holding the forwards' operators;
refused while off, twice, or with nothing to stop; and the loop's calls on its thread fail once it
has stopped."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from tests.unit.verifier.test_engine_loop import FlakyEngine, collect, request
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.server.engine_loop import EngineLoop, EngineStoppedError
from treespec.verifier.server.profiler import EngineProfiler, ProfilerStateError


@pytest.fixture
def engine(tiny_path: Path, tiny_model: CausalLM) -> FlakyEngine:
    return FlakyEngine(
        EngineConfig(model_path=tiny_path, page_size=4, max_total_tokens=1024), None, tiny_model
    )


def _operators(trace: Path) -> set[str]:
    return {event.get("name", "") for event in json.loads(trace.read_text())["traceEvents"]}


def test_a_trace_records_the_engine_s_steps_until_stopped(engine: FlakyEngine, tmp_path: Path) -> None:
    loop = EngineLoop(engine, profiler=EngineProfiler(tmp_path / "traces"))
    loop.start()

    async def main() -> tuple[Path, Path, str]:
        planned = await loop.start_profile()
        await collect(loop, request("a"))
        written = await loop.stop_profile()
        thread = await loop.on_engine_thread(lambda: threading.current_thread().name)
        return planned, written, thread

    try:
        planned, written, thread = asyncio.run(main())
    finally:
        loop.stop()
    assert planned == written and written.parent == tmp_path / "traces" and thread == "treespec-engine"
    assert any(name.startswith("aten::") for name in _operators(written))


def test_a_trace_of_so_many_steps_stops_by_itself(engine: FlakyEngine, tmp_path: Path) -> None:
    loop = EngineLoop(engine, profiler=EngineProfiler(tmp_path))
    loop.start()

    async def main() -> Path:
        planned = await loop.start_profile(num_steps=2)
        await collect(loop, request("a", n=8))  # more steps than that
        with pytest.raises(ProfilerStateError):
            await loop.stop_profile()  # stopped already
        return planned

    try:
        planned = asyncio.run(main())
    finally:
        loop.stop()
    assert planned.is_file() and any(name.startswith("aten::") for name in _operators(planned))


def test_profiling_off_twice_or_with_nothing_to_stop_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfilerStateError, match="--profile-dir"):
        EngineProfiler(None).start()
    profiler = EngineProfiler(tmp_path)
    with pytest.raises(ProfilerStateError, match="no trace"):
        profiler.stop()
    profiler.start()
    with pytest.raises(ProfilerStateError, match="already"):
        profiler.start()
    assert profiler.stop().is_file() and not profiler.recording


def test_calls_on_the_engine_thread_fail_once_it_has_stopped(engine: FlakyEngine) -> None:
    loop = EngineLoop(engine)
    loop.start()
    loop.stop()

    async def main() -> None:
        with pytest.raises(EngineStoppedError):
            await loop.on_engine_thread(lambda: 1)

    asyncio.run(main())

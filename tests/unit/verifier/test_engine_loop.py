"""The engine thread: sleeps when idle, survives a failing step, frees what a consumer abandons."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import (
    FinishReason,
    GenerationRequest,
    InvalidRequestError,
    RequestOutput,
    SamplingParams,
)
from treespec.verifier.server.engine_loop import DuplicateRequestError, EngineLoop, EngineStepError


class FlakyEngine(Engine):
    """Counts steps; fails the next one when told."""

    steps = 0
    fail_next = False

    def step(self) -> list[RequestOutput]:
        self.steps += 1
        if self.fail_next:
            self.fail_next = False
            super().step()  # the requests are in the engine when it fails
            raise RuntimeError("boom")
        return super().step()


def request(rid: str, n: int = 6) -> GenerationRequest:
    return GenerationRequest(rid, [3, 1, 4, 1, 5], SamplingParams(temperature=0.0, max_new_tokens=n))


async def collect(loop: EngineLoop, req: GenerationRequest) -> list[RequestOutput]:
    return [out async for out in await loop.submit(req)]


@pytest.fixture
def engine(tiny_path: Path, tiny_model: CausalLM) -> FlakyEngine:
    return FlakyEngine(
        EngineConfig(model_path=tiny_path, page_size=4, max_total_tokens=1024), None, tiny_model
    )


def test_serves_sleeps_and_stops(engine: FlakyEngine) -> None:
    loop = EngineLoop(engine)
    loop.start()

    async def main() -> None:
        outputs = await collect(loop, request("a"))
        assert sum(len(o.token_ids) for o in outputs) == 6
        assert outputs[-1].finish_reason is FinishReason.LENGTH
        steps = engine.steps
        await asyncio.sleep(0.2)
        assert engine.steps == steps  # idle: no step, no spin
        with pytest.raises(InvalidRequestError):
            await loop.submit(GenerationRequest("empty", []))

    asyncio.run(main())
    loop.stop()
    assert not loop.is_alive


def test_failed_step_fails_its_requests_and_the_loop_goes_on(engine: FlakyEngine) -> None:
    loop = EngineLoop(engine)
    loop.start()

    async def main() -> None:
        engine.fail_next = True
        with pytest.raises(EngineStepError, match="boom"):
            await collect(loop, request("x"))
        deadline = time.monotonic() + 5
        while loop.num_live and time.monotonic() < deadline:  # until the engine has dropped it
            await asyncio.sleep(0.01)
        outputs = await collect(loop, request("x"))  # the id is free again
        assert outputs[-1].finish_reason is FinishReason.LENGTH

    asyncio.run(main())
    loop.stop()
    assert engine.num_free_blocks == engine.config.num_blocks


def test_abandoned_stream_is_aborted_and_its_id_stays_taken_until_then(engine: FlakyEngine) -> None:
    loop = EngineLoop(engine)
    loop.start()

    async def main() -> None:
        stream = await loop.submit(request("y", n=100))
        await stream.__anext__()
        with pytest.raises(DuplicateRequestError):
            await loop.submit(request("y"))
        await stream.aclose()
        deadline = time.monotonic() + 5
        while loop.num_live and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert loop.num_live == 0
        snapshot = loop.snapshot()
        assert snapshot.kv_blocks_free == snapshot.kv_blocks_total
        assert snapshot.running_requests == 0

    asyncio.run(main())
    loop.stop()

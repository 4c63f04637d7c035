"""Redis down must never fail nor slow a request: lookups read as empty at once, writes are buffered
(bounded) and drained once the store is back; one warning per outage, one info line on reconnection."""

from __future__ import annotations

import logging
import time

import pytest

from tests.redis_server import RedisServer
from tests.unit.drafter.ngram.backends import TEST_READ_TIMEOUT_S, config
from treespec.drafter.ngram.memory import Continuation
from treespec.drafter.ngram.redis_memory import RedisMemory
from treespec.shared.launcher.ports import free_port

RECONNECT_WAIT_S = 5.0


def _wait_healthy(memory: RedisMemory, timeout_s: float = RECONNECT_WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if memory.healthy:
            return True
        time.sleep(0.02)
    return False


def test_a_crash_reads_as_empty_at_once_and_a_restart_drains_the_buffer(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="treespec.drafter.ngram")
    memory = RedisMemory(redis_server.url, config())
    try:
        memory.record([((1,), (2,))])
        assert memory.flush()
        redis_server.stop()

        started = time.monotonic()
        for i in range(10):
            assert memory.lookup([(100 + i,), (200 + i,)]) == [[], []]
        assert time.monotonic() - started < 0.5
        assert not memory.healthy
        memory.record([((1,), (2,)), ((5,), (6,))])  # buffered
        assert not memory.flush(timeout_s=0.1)

        redis_server.start()
        assert _wait_healthy(memory)
        assert memory.flush()
        # The server kept nothing across its crash (no persistence): only the buffered writes are there.
        assert memory.lookup([(1,), (5,)]) == [[Continuation((2,), 1)], [Continuation((6,), 1)]]
    finally:
        memory.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert any("reconnected" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


def test_a_hung_server_costs_one_read_timeout_and_loses_no_write(redis_server: RedisServer) -> None:
    """A server that holds its connections and answers nothing (stopped, swapping, a network black hole):
    a lookup gives up after the read timeout, and the batch the writer had in flight stays queued
    while the reconnect probes run, then lands once the server answers again."""
    memory = RedisMemory(redis_server.url, config())
    try:
        memory.record([((1,), (2,))])
        assert memory.flush()
        redis_server.hang()
        memory.record([((3,), (4,)), ((5,), (6,))])
        assert not memory.flush(timeout_s=0.1)  # the writer is now blocked on the hung server

        started = time.monotonic()
        assert memory.lookup([(7,)]) == [[]]
        assert time.monotonic() - started < TEST_READ_TIMEOUT_S + 0.5
        assert not memory.healthy
        started = time.monotonic()
        assert memory.lookup([(8,)]) == [[]]  # marked down: no second wait
        assert time.monotonic() - started < 0.05
        time.sleep(0.5)  # reconnect probes run while the writer still waits for its reply

        redis_server.resume()
        assert _wait_healthy(memory)
        assert memory.flush()
        assert memory.dropped == 0
        found = memory.lookup([(1,), (3,), (5,)])
        assert found == [[Continuation((2,), 1)], [Continuation((4,), 1)], [Continuation((6,), 1)]]
    finally:
        memory.close()


def test_unreachable_at_start_then_up_keeps_the_newest_buffered(caplog: pytest.LogCaptureFixture) -> None:
    server = RedisServer(port=free_port())
    started = time.monotonic()
    memory = RedisMemory(server.url, config(max_pending=10))
    try:
        assert time.monotonic() - started < 0.5
        assert not memory.healthy
        assert memory.lookup([(1,)]) == [[]]
        memory.record([((i,), (0,)) for i in range(25)])
        assert memory.dropped == 15
        server.start()
        assert _wait_healthy(memory)
        assert memory.flush()
        found = memory.lookup([(i,) for i in range(25)])
        assert found == [[]] * 15 + [[Continuation((0,), 1)]] * 10
    finally:
        memory.close()
        server.stop()


def test_close_while_down_returns_promptly(redis_server: RedisServer) -> None:
    memory = RedisMemory(redis_server.url, config())
    redis_server.stop()
    memory.record([((1,), (2,))])
    assert memory.lookup([(1,)]) == [[]]
    started = time.monotonic()
    memory.close()
    assert time.monotonic() - started < 1.5
    memory.record([((1,), (2,))])  # after close: ignored, never raises
    assert memory.lookup([(1,)]) == [[]]


def test_close_while_hung_returns_promptly_and_warns_of_no_rejection(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="treespec.drafter.ngram")
    memory = RedisMemory(redis_server.url, config())
    assert memory.flush()
    redis_server.hang()
    memory.record([((1,), (2,))])
    assert not memory.flush(timeout_s=0.1)  # the writer is now blocked on the hung server
    started = time.monotonic()
    memory.close()
    assert time.monotonic() - started < 1.5
    time.sleep(0.2)  # the writer's blocked write ends as its socket closes
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_malformed_url_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        RedisMemory("notredis://localhost", config())

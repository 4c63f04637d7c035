"""Test-wide settings (no hub access: every model is local) and the tiny random model fixtures."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pluggy
import pytest
import torch

from tests.redis_server import RedisServer
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama checkpoint (vocabulary 97) in HF format."""
    from tests.unit.model.test_forward_vs_hf import make_checkpoint

    path: Path = tmp_path_factory.mktemp("tiny-llama")
    make_checkpoint(path, "llama")
    return path


@pytest.fixture(scope="session")
def tiny_model(tiny_path: Path) -> CausalLM:
    return load_model(tiny_path)


@pytest.fixture(scope="module")
def one_torch_thread() -> Generator[None, None, None]:
    """One torch thread for a module's tests (`pytestmark = pytest.mark.usefixtures(...)`)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def redis_server() -> Generator[RedisServer, None, None]:
    """A fresh redis-server on a free port, killed afterwards (tests may stop and restart it)."""
    yield from _redis_server()


@pytest.fixture(scope="module")
def module_redis_server() -> Generator[RedisServer, None, None]:
    """One redis-server for a module's tests (each that stops it starts it again)."""
    yield from _redis_server()


def _redis_server() -> Generator[RedisServer, None, None]:
    try:
        server = RedisServer()
    except FileNotFoundError as error:
        message = f"the Redis tests need a local redis-server binary: {error}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-gpu",
        action="store_true",
        help="run the tests marked gpu (tests/gpu; they fail where CUDA is missing); without it they are "
        "deselected, since CI has no GPU (`make test-gpu` on a GPU machine)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The gpu tests run only with --run-gpu: deselected (listed as such), never skipped."""
    if config.getoption("--run-gpu"):
        return
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu:
        config.hook.pytest_deselected(items=gpu)
        items[:] = [item for item in items if item.get_closest_marker("gpu") is None]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    """Under CI=true a skipped test fails: a skip there hides a missing part (a service, a file)."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true: {report.longrepr}"

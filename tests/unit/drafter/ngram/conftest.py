"""`backend`: every contract test runs on the in-process memory and on a real Redis."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.unit.drafter.ngram.backends import Backend


@pytest.fixture(params=["in_process", "redis"])
def backend(request: pytest.FixtureRequest) -> Generator[Backend, None, None]:
    server = request.getfixturevalue("redis_server") if request.param == "redis" else None
    opened = Backend(name=request.param, server=server)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> Generator[Backend, None, None]:
    opened = Backend(name="redis", server=request.getfixturevalue("redis_server"))
    try:
        yield opened
    finally:
        opened.close()

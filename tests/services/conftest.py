"""The gateway stack of the gateway tests (test_gateway_api.py, test_gateway_errors.py): a real
`treespec verifier` (random drafts) and `treespec gateway` as child processes, started once for the
package when a test first asks for them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.services.gateway_stack import KEY, Service, healthy, start_gateway, start_verifier
from treespec.gateway.tokenizer import PromptTokenizer
from treespec.shared.launcher.ports import free_port
from treespec.shared.model.store import models_dir, resolve_model_path


@pytest.fixture(scope="package")
def model_path() -> Path:
    return resolve_model_path(None, models_dir())


@pytest.fixture(scope="package")
def verifier(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = free_port()
    service = start_verifier(model_path, port, tmp_path_factory.mktemp("verifier"))
    yield port
    service.stop()


@pytest.fixture(scope="package")
def gateway(
    model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Service]]:
    port = free_port()
    service = start_gateway(model_path, verifier, port, tmp_path_factory.mktemp("gateway"), (KEY,))
    url = f"http://127.0.0.1:{port}"
    service.wait_until(lambda: healthy(url), timeout_s=60)
    yield url, service
    service.stop()


@pytest.fixture(scope="package")
def url(gateway: tuple[str, Service]) -> str:
    return gateway[0]


@pytest.fixture(scope="package")
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="package")
def http(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as c:
        yield c


@pytest.fixture(scope="package")
def tokenizer(model_path: Path) -> PromptTokenizer:
    return PromptTokenizer(model_path)

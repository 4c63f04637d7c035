"""HTTPS at the gateway (vLLM's --ssl-* flags) with the official `openai` client: a gateway that
asks for client certificates from a test CA, against the package's verifier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.services.gateway_stack import HI, KEY, MODEL, start, start_gateway
from tests.tls_files import TlsTestFiles, write_tls_files
from treespec.shared.launcher.health import http_ok
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsTestFiles:
    return write_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def secured(
    model_path: Path, verifier: int, tls: TlsTestFiles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    port = free_port()
    flags = (*tls.server_flags(), "--ssl-ca-certs", str(tls.ca_pem), "--ssl-cert-reqs", "2")
    service = start_gateway(model_path, verifier, port, tmp_path_factory.mktemp("gateway-tls"), (KEY,), flags)
    assert f"gateway listening on https://127.0.0.1:{port}" in service.log_tail()
    yield port
    service.stop()


def test_the_openai_client_talks_https(secured: int, tls: TlsTestFiles) -> None:
    http_client = openai.DefaultHttpxClient(verify=tls.client_context())
    client = openai.OpenAI(
        base_url=f"https://127.0.0.1:{secured}/v1", api_key=KEY, max_retries=0, http_client=http_client
    )
    whole = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4, temperature=0)
    streamed = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=4, temperature=0, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == whole.choices[0].message.content != ""


def test_what_the_gateway_refuses(secured: int, tls: TlsTestFiles) -> None:
    """No client certificate, plain HTTP, an untrusted server certificate: no answer."""
    url = f"https://127.0.0.1:{secured}/health"
    with pytest.raises(httpx.HTTPError):
        httpx.get(url, verify=tls.client_context(with_certificate=False))
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{secured}/health")
    assert httpx.get(url, verify=tls.client_context()).status_code == 200
    assert not http_ok(url)  # the system's CAs do not know the test CA's certificate


def test_files_that_do_not_load_stop_the_gateway(model_path: Path, tls: TlsTestFiles, tmp_path: Path) -> None:
    args = ["gateway", "--model-path", str(model_path), "--verifier-address", "127.0.0.1:1"]
    mismatched = ["--ssl-keyfile", str(tls.client_pem), "--ssl-certfile", str(tls.certfile)]
    service = start("gateway", [*args, *mismatched], tmp_path / "log")
    assert service.process.wait(timeout=60) == 2
    assert "--ssl-certfile" in service.log_tail() and "KEY_VALUES_MISMATCH" in service.log_tail()

"""The gateway's HTTPS files (vLLM's --ssl-* flags): checked as the gateway starts, handed by `treespec
serve` to its gateway, and serve's readiness probe over HTTPS."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.tls_files import TlsTestFiles, write_tls_files
from treespec.gateway.tls import TlsFiles, tls_files
from treespec.shared.cli.gateway import tls_settings
from treespec.shared.cli.main import build_parser, main
from treespec.shared.launcher.health import http_ok, tcp_open


def test_files_are_checked_when_given(tmp_path: Path) -> None:
    files = write_tls_files(tmp_path)
    assert tls_files(None, None) is None  # plain HTTP
    assert tls_files(files.keyfile, files.certfile) == TlsFiles(files.keyfile, files.certfile)
    mutual = tls_files(files.keyfile, files.certfile, files.ca_pem, 2)
    assert mutual is not None and mutual.uvicorn_options()["ssl_cert_reqs"] == 2
    problems = {
        "go together": (files.keyfile, None),
        "need --ssl-keyfile and --ssl-certfile": (None, None, files.ca_pem),
        "needs --ssl-ca-certs": (files.keyfile, files.certfile, None, 1),
        "key values mismatch": (files.client_pem, files.certfile),
        "No such file": (tmp_path / "missing.pem", files.certfile),
        "--ssl-ca-certs .*no certificate": (files.keyfile, files.certfile, files.keyfile, 2),
    }
    for message, args in problems.items():
        with pytest.raises(ValueError, match=message):
            tls_files(*args)  # type: ignore[arg-type]


def test_serve_hands_them_to_its_gateway_and_probes_its_port(tmp_path: Path) -> None:
    """The gateway's flags parse back into the same files; the URL says https; ready once its port
    takes connections (its certificate may name another host, and it may ask for a client's)."""
    from treespec.shared.cli.serve import _gateway_ready, serve_config, services

    files = write_tls_files(tmp_path)
    flags = [*files.server_flags(), "--ssl-ca-certs", str(files.ca_pem), "--ssl-cert-reqs", "2"]
    config = serve_config(build_parser().parse_args(["serve", *flags]))
    assert config.url.startswith("https://") and config.tls is not None
    gateway = list(services(config)[-1].argv)
    assert tls_settings(build_parser().parse_args(gateway)) == config.tls
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert tcp_open("127.0.0.1", port) and tcp_open("0.0.0.0", port)
        ready = serve_config(build_parser().parse_args(["serve", *flags, "--port", str(port)]))
        assert _gateway_ready(ready)
    assert not tcp_open("127.0.0.1", port)
    with pytest.raises(SystemExit):  # run-batch's stack is its own, on loopback
        build_parser().parse_args(["run-batch", "-i", "a", "-o", "b", *files.server_flags()])


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture()
def https_health(tmp_path: Path) -> Iterator[tuple[str, TlsTestFiles]]:
    """An HTTPS server (the stdlib's) answering 200, with a certificate from a test CA."""
    files = write_tls_files(tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.certfile, files.keyfile)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}/health", files
    server.shutdown()
    server.server_close()


def test_health_checks_a_certificate_unless_told_not_to(https_health: tuple[str, TlsTestFiles]) -> None:
    """`treespec health https://...` checks the certificate against the system's CAs (a self-signed
    one fails, exit 1); `--insecure` does not."""
    url, _ = https_health
    assert not http_ok(url) and http_ok(url, verify=False)
    assert main(["health", url, "--timeout", "5"]) == 1
    assert main(["health", url, "--timeout", "5", "--insecure"]) == 0

"""A port another server listens on is named before a service loads anything (shared/launcher/ports.py),
by `treespec verifier`, `treespec serve` and `treespec drafter`."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from treespec.shared.cli.main import main
from treespec.shared.launcher.ports import free_port, free_ports, port_in_use


@pytest.fixture
def listening_socket() -> Iterator[socket.socket]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s


@pytest.fixture
def listening(listening_socket: socket.socket) -> int:
    return int(listening_socket.getsockname()[1])


def test_free_ports_are_distinct() -> None:
    for _ in range(50):
        ports = free_ports(3)
        assert len(set(ports)) == 3


def test_a_health_check_answered_in_another_protocol_is_not_ready(listening_socket: socket.socket) -> None:
    from treespec.shared.launcher.health import http_ok

    def answer() -> None:  # as a gRPC server answers HTTP/1: an HTTP/2 SETTINGS frame
        conn, _ = listening_socket.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64\n")

    thread = threading.Thread(target=answer)
    thread.start()
    assert not http_ok(f"http://127.0.0.1:{listening_socket.getsockname()[1]}/health")
    thread.join()


def test_a_listening_port_is_in_use_and_a_free_one_is_not(listening: int) -> None:
    assert port_in_use("127.0.0.1", listening)
    assert not port_in_use("127.0.0.1", free_port())
    assert not port_in_use("no-such-host.invalid", listening)  # the server's own bind names that


@pytest.mark.parametrize("command", ["verifier", "serve", "drafter"])
def test_a_taken_port_stops_the_command_before_it_loads_the_model(
    command: str, listening: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No model in tmp_path: a command that went on to load one would fail on that, with another message.
    kind = ["--kind", "eagle3"] if command == "drafter" else []
    assert main([command, *kind, "--model-path", str(tmp_path), "--port", str(listening)]) == 2
    err = capsys.readouterr().err
    assert f"treespec {command}: error: already in use: 127.0.0.1:{listening}" in err

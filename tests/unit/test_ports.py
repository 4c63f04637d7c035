"""A port another server listens on is named before a service loads anything (shared/launcher/ports.py),
by `treespec verifier`, `treespec serve` and `treespec drafter`."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from treespec.shared.cli.main import main
from treespec.shared.launcher.ports import free_port, port_in_use


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


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

"""The cross-origin policy's flags, --enable-request-id-headers and the HTTP log's flags (vLLM's):
parsed, and handed by `treespec serve` to its gateway."""

from __future__ import annotations

import pytest

from treespec.gateway.cors import CorsPolicy, string_list
from treespec.shared.cli.gateway import cors_policy
from treespec.shared.cli.main import build_parser


def test_flag_lists() -> None:
    assert string_list('["https://a.example", "http://localhost:3000"]') == (
        "https://a.example",
        "http://localhost:3000",
    )
    assert string_list("https://a.example") == ("https://a.example",)  # a bare string: a list of one
    assert string_list("[]") == ()
    for bad in ('{"a": 1}', "[1]", "3"):
        with pytest.raises(ValueError, match="not a JSON list of strings"):
            string_list(bad)


def test_the_policy_travels_as_flags() -> None:
    """What serve hands its gateway parses back into the same policy; the defaults travel as nothing."""
    from treespec.shared.cli.serve import serve_config, services

    flags = ["--allowed-origins", '["https://a.example"]', "--allowed-headers", "[]", "--allow-credentials"]
    logs = ["--enable-request-id-headers", "--disable-uvicorn-access-log", "--uvicorn-log-level", "error"]
    config = serve_config(build_parser().parse_args(["serve", *flags, *logs]))
    assert config.cors == CorsPolicy(("https://a.example",), ("*",), (), True)
    gateway = list(services(config)[-1].argv)
    assert CorsPolicy().argv() == []
    ns = build_parser().parse_args([*gateway, "--verifier-address", "127.0.0.1:1"])
    assert cors_policy(ns) == config.cors and ns.enable_request_id_headers
    assert (ns.disable_uvicorn_access_log, ns.uvicorn_log_level) == (True, "error")
    quiet = services(serve_config(build_parser().parse_args(["serve"])))[-1].argv
    assert "--enable-request-id-headers" not in quiet
    # run-batch's stack is its own, on loopback: the defaults, and no such flag.
    batch = build_parser().parse_args(["run-batch", "-i", "in.jsonl", "-o", "out.jsonl"])
    assert serve_config(batch).cors == CorsPolicy()
    assert not serve_config(batch).logs.access_log  # its own stack: no line per batch request
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run-batch", "-i", "a", "-o", "b", "--allowed-origins", "[]"])

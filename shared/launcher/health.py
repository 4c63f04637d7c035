"""Readiness probes: the standard gRPC health check, an HTTP GET, and a TCP connection."""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.error
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def grpc_serving(address: str, timeout_s: float = 1.0) -> bool:
    try:
        with grpc.insecure_channel(address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
    except grpc.RpcError:
        return False


def http_ok(url: str, timeout_s: float = 1.0, verify: bool = True) -> bool:
    """A GET of `url` answers 200; `verify` False: an https URL's certificate is not checked."""
    context = None if verify else ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, http.client.HTTPException):  # HTTPException: not HTTP/1 there
        return False


def tcp_open(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Something accepts connections at host:port (0.0.0.0 and :: are asked at the loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False

"""A test CA (trustme) and the files the gateway's HTTPS flags take: a server certificate for the
loopback address, and a client certificate from the same CA."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class TlsTestFiles:
    ca: trustme.CA
    ca_pem: Path
    keyfile: Path
    certfile: Path
    client_pem: Path  # the client's key and certificate chain, one PEM

    def server_flags(self) -> tuple[str, ...]:
        return ("--ssl-keyfile", str(self.keyfile), "--ssl-certfile", str(self.certfile))

    def client_context(self, with_certificate: bool = True) -> ssl.SSLContext:
        """What a client trusting the CA connects with (presenting its certificate, or none)."""
        context = ssl.create_default_context(cafile=str(self.ca_pem))
        if with_certificate:
            context.load_cert_chain(str(self.client_pem))
        return context


def write_tls_files(folder: Path) -> TlsTestFiles:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@treespec.test")
    paths = {name: folder / f"{name}.pem" for name in ("ca", "key", "cert", "client")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.private_key_pem.write_to_path(str(paths["key"]))
    server.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    client.private_key_and_cert_chain_pem.write_to_path(str(paths["client"]))
    return TlsTestFiles(ca, paths["ca"], paths["key"], paths["cert"], paths["client"])

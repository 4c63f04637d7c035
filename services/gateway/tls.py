"""HTTPS at the gateway itself (vLLM's `--ssl-keyfile`, `--ssl-certfile`, `--ssl-ca-certs`,
`--ssl-cert-reqs`; SGLang's first two), for a deployment without a proxy in front to end TLS.

The files are checked when the gateway starts (they load into a TLS context, or the gateway stops
with the reason), not at its first connection; uvicorn then serves with them.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# --ssl-cert-reqs: the stdlib's values, as vLLM takes them.
CERT_REQS = {0: "none", 1: "optional", 2: "required"}
NO_CLIENT_CERTIFICATE = 0  # ssl.CERT_NONE's value


@dataclass(frozen=True)
class TlsFiles:
    keyfile: Path
    certfile: Path
    ca_certs: Path | None = None  # the CAs a client certificate must chain to
    cert_reqs: int = NO_CLIENT_CERTIFICATE  # 0: no client certificate asked for; 1: optional; 2: required

    def check(self) -> None:
        """Load the files as the server will; a ValueError names the one that does not work."""
        if self.cert_reqs not in CERT_REQS:
            raise ValueError(f"--ssl-cert-reqs must be one of 0, 1, 2 (got {self.cert_reqs})")
        if self.cert_reqs != NO_CLIENT_CERTIFICATE and self.ca_certs is None:
            raise ValueError(
                "--ssl-cert-reqs 1 or 2 needs --ssl-ca-certs (the CAs client certificates chain to)"
            )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(self.certfile, self.keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"--ssl-certfile {self.certfile} / --ssl-keyfile {self.keyfile}: {exc}"
            ) from None
        if self.ca_certs is not None:
            try:
                context.load_verify_locations(self.ca_certs)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"--ssl-ca-certs {self.ca_certs}: {exc}") from None

    def uvicorn_options(self) -> dict[str, Any]:
        return {
            "ssl_keyfile": str(self.keyfile),
            "ssl_certfile": str(self.certfile),
            "ssl_ca_certs": None if self.ca_certs is None else str(self.ca_certs),
            "ssl_cert_reqs": self.cert_reqs,
        }

    def argv(self) -> list[str]:
        """The gateway flags that ask for these files."""
        out = ["--ssl-keyfile", str(self.keyfile), "--ssl-certfile", str(self.certfile)]
        if self.ca_certs is not None:
            out += ["--ssl-ca-certs", str(self.ca_certs)]
        return [*out, "--ssl-cert-reqs", str(self.cert_reqs)]


def tls_files(
    keyfile: Path | None,
    certfile: Path | None,
    ca_certs: Path | None = None,
    cert_reqs: int = NO_CLIENT_CERTIFICATE,
) -> TlsFiles | None:
    """The files the flags name, checked; None without a key and certificate (plain HTTP). A
    ValueError for one given without the other, or for files that do not load."""
    if keyfile is None and certfile is None:
        if ca_certs is not None or cert_reqs != NO_CLIENT_CERTIFICATE:
            raise ValueError("--ssl-ca-certs and --ssl-cert-reqs need --ssl-keyfile and --ssl-certfile")
        return None
    if keyfile is None or certfile is None:
        raise ValueError("--ssl-keyfile and --ssl-certfile go together")
    files = TlsFiles(keyfile, certfile, ca_certs, cert_reqs)
    files.check()
    return files

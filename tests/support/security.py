"""Test kit for security: certificate authorities made with ``trustme`` (written to PEM files)
and keys/tokens made with the project's own ``magnetar tokens`` command."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from dataclasses import dataclass

import trustme


@dataclass(frozen=True)
class TlsFiles:
    ca: str
    cert: str
    key: str


def make_ca(directory: pathlib.Path, name: str) -> tuple[trustme.CA, str]:
    ca = trustme.CA()
    path = directory / f"{name}-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return ca, str(path)


def issue(
    ca: trustme.CA,
    ca_path: str,
    directory: pathlib.Path,
    name: str,
    *identities: str,
    common_name: str | None = None,
) -> TlsFiles:
    """A certificate for ``identities`` (host names/IPs; a client's CN via ``common_name``)."""
    cert = ca.issue_cert(*(identities or ("localhost",)), common_name=common_name)
    cert_path = directory / f"{name}-cert.pem"
    key_path = directory / f"{name}-key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    return TlsFiles(ca_path, str(cert_path), str(key_path))


def magnetar_tokens(*args: str) -> str:
    """Run ``magnetar tokens ARGS`` and return its stdout (stripped); raises on failure."""
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.broker.cli", "tokens", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.strip()


@dataclass(frozen=True)
class TokenKit:
    """A secret key file and a way to mint tokens with it."""

    secret_key_file: pathlib.Path

    @property
    def url(self) -> str:
        return f"file://{self.secret_key_file}"

    def token(self, role: str, expiry: str | None = None) -> str:
        args = ["create", "--secret-key", self.url, "--subject", role]
        if expiry is not None:
            args += ["--expiry-time", expiry]
        return magnetar_tokens(*args)


def make_token_kit(directory: pathlib.Path) -> TokenKit:
    path = directory / "secret.key"
    magnetar_tokens("create-secret-key", "--output", str(path))
    return TokenKit(path)

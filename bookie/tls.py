"""TLS for the bookie's gRPC service, both ends: PEM files -> gRPC credentials.

Owns: ``GrpcTls`` (certificate, key, trusted CA, whether the other side must present a
certificate) and building ``grpc.ServerCredentials`` for ``BookieServer`` and
``grpc.ChannelCredentials`` for ``BookieClient``. Unreadable files raise ``ValueError`` at
start, not at the first RPC. Must not know: the bookie service, ledgers.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import grpc


@dataclass(frozen=True, slots=True)
class GrpcTls:
    certificate_file: str = ""  # server: required; client: only for client authentication
    key_file: str = ""
    trust_certs_file: str = ""  # server: CA of client certificates; client: CA of the bookie
    require_client_auth: bool = False

    def _read(self, path: str, what: str) -> bytes:
        try:
            return pathlib.Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"bookie TLS: cannot read the {what} {path}: {exc.strerror}") from None

    def server_credentials(self) -> grpc.ServerCredentials:
        if not self.certificate_file or not self.key_file:
            raise ValueError("bookie TLS needs a certificate and a key file")
        if self.require_client_auth and not self.trust_certs_file:
            raise ValueError("bookie TLS client authentication needs a trusted CA file")
        return grpc.ssl_server_credentials(
            [(self._read(self.key_file, "key"), self._read(self.certificate_file, "certificate"))],
            root_certificates=self._read(self.trust_certs_file, "CA file")
            if self.trust_certs_file
            else None,
            require_client_auth=self.require_client_auth,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self._read(self.trust_certs_file, "CA file")
            if self.trust_certs_file
            else None,
            private_key=self._read(self.key_file, "key") if self.key_file else None,
            certificate_chain=self._read(self.certificate_file, "certificate")
            if self.certificate_file
            else None,
        )


__all__ = ["GrpcTls"]

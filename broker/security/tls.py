"""Server-side TLS: the broker's ``SSLContext`` built from PEM files, reloaded when they change.

Owns: turning the ``tls_*`` settings (Pulsar's ``tlsCertificateFilePath``, ``tlsKeyFilePath``,
``tlsTrustCertsFilePath``, ``tlsRequireTrustedClientCertOnConnect``, ``tlsProtocols``,
``tlsCiphers``, ``tlsCertRefreshCheckDurationSec``) into an ``ssl.SSLContext`` for the binary
(``pulsar+ssl://``) and HTTPS listeners, and swapping in a freshly built context when any of
the three files' modification time changes (checked every refresh interval). New connections
get the new context; established ones keep theirs.

How the swap works: the listeners are created once with a *front* context whose SNI callback
(OpenSSL's server-name callback, which runs for every handshake, with or without SNI) hands
each new connection the current context. The front context carries the same verify mode, so
client-certificate requirements never depend on which context a handshake picked up.

Invariants: TLS 1.2 is the minimum unless ``tls_protocols`` names older versions explicitly
(it may only narrow); a reload that fails (a half-written file, a key not matching the
certificate) keeps the previous context and is logged, never takes the listener down.
Must not know: the protocol, authentication (the role of a client certificate is read by
``authentication.py`` from the peer certificate).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from dataclasses import dataclass

log = logging.getLogger(__name__)

_PROTOCOLS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


class TlsConfigError(ValueError):
    """The TLS settings cannot be used (missing file, unknown protocol, bad key)."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    certificate_file: str
    key_file: str
    trust_certs_file: str = ""
    require_client_cert: bool = False
    protocols: tuple[str, ...] = ()
    ciphers: str = ""
    refresh_check_s: float = 300.0

    @classmethod
    def from_config(cls, config: object) -> TlsSettings:
        """From a ``BrokerConfig`` (duck-typed so this module does not import it)."""
        get = config.__getattribute__
        protocols = tuple(p.strip() for p in str(get("tls_protocols")).split(",") if p.strip())
        return cls(
            certificate_file=str(get("tls_certificate_file_path")),
            key_file=str(get("tls_key_file_path")),
            trust_certs_file=str(get("tls_trust_certs_file_path")),
            require_client_cert=bool(get("tls_require_trusted_client_cert_on_connect")),
            protocols=protocols,
            ciphers=str(get("tls_ciphers")),
            refresh_check_s=float(get("tls_cert_refresh_check_duration_sec")),
        )

    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.certificate_file, self.key_file, self.trust_certs_file) if f)


def build_server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server ``SSLContext`` from the settings; ``TlsConfigError`` if unusable."""
    if not settings.certificate_file or not settings.key_file:
        raise TlsConfigError("TLS needs tls_certificate_file_path and tls_key_file_path to be set")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols(ctx, settings.protocols)
    if settings.ciphers:
        try:
            ctx.set_ciphers(settings.ciphers)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"tls_ciphers {settings.ciphers!r}: {exc}") from None
    try:
        ctx.load_cert_chain(settings.certificate_file, settings.key_file)
        if settings.trust_certs_file:
            ctx.load_verify_locations(settings.trust_certs_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load TLS certificate/key/CA: {exc}") from None
    _apply_verify(ctx, settings)
    return ctx


def _apply_protocols(ctx: ssl.SSLContext, protocols: tuple[str, ...]) -> None:
    if not protocols:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return
    versions = []
    for name in protocols:
        version = _PROTOCOLS.get(name)
        if version is None:
            raise TlsConfigError(
                f"tls_protocols: unknown or insecure protocol {name!r} "
                f"(allowed: {', '.join(_PROTOCOLS)})"
            )
        versions.append(version)
    ctx.minimum_version = min(versions)
    ctx.maximum_version = max(versions)


def _apply_verify(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    if settings.require_client_cert:
        if not settings.trust_certs_file:
            raise TlsConfigError(
                "tls_require_trusted_client_cert_on_connect needs tls_trust_certs_file_path"
            )
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif settings.trust_certs_file:
        ctx.verify_mode = ssl.CERT_OPTIONAL  # a presented client cert is verified (mTLS role)
    else:
        ctx.verify_mode = ssl.CERT_NONE


class ReloadingServerContext:
    """The listeners' front ``SSLContext`` plus the current one, rebuilt on file change."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self.front = build_server_context(settings)
        self.front.sni_callback = self._pick
        self.current = self.front
        self._mtimes = self._stat()
        self.reloads = 0
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<ReloadingServerContext {self.settings.certificate_file} reloads={self.reloads}>"

    def _pick(
        self, sock: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _ctx: ssl.SSLContext
    ) -> None:
        if self.current is not self.front:
            sock.context = self.current

    def _stat(self) -> tuple[float, ...]:
        out = []
        for path in self.settings.files():
            try:
                out.append(os.stat(path).st_mtime)
            except OSError:
                out.append(-1.0)
        return tuple(out)

    def check(self) -> bool:
        """Rebuild the context if a file changed; True if a new context is now in use."""
        mtimes = self._stat()
        if mtimes == self._mtimes:
            return False
        try:
            fresh = build_server_context(self.settings)
        except TlsConfigError as exc:
            log.warning("TLS files changed but cannot be loaded (keeping the old ones): %s", exc)
            return False
        self._mtimes = mtimes
        self.current = fresh
        self.reloads += 1
        log.info("TLS certificate/key/CA reloaded from %s", ", ".join(self.settings.files()))
        return True

    def start(self) -> None:
        if self.settings.refresh_check_s > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.refresh_check_s)
            self.check()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


__all__ = [
    "ReloadingServerContext",
    "TlsConfigError",
    "TlsSettings",
    "build_server_context",
]

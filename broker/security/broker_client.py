"""This broker as a client of other brokers: the credentials and TLS context of its own calls
to their admin REST (the load manager's unload and split, lookups through the leader), and
of its geo-replicators' calls to a remote cluster (that cluster's ``ClusterData``).

Owns: turning Pulsar's broker-client settings (``brokerClientAuthenticationPlugin``,
``brokerClientAuthenticationParameters``, ``brokerClientTlsEnabled``,
``brokerClientTrustCertsFilePath``, ``brokerClientCertificateFilePath``,
``brokerClientKeyFilePath``; the token, TLS and basic plugins) into the ``Authorization``
header and the ``ssl`` argument of each request (``BrokerClientAuth.request_options``), and
choosing the HTTPS URL of a broker when TLS is on. A token given as ``file:///path`` is read
again for every request, so a rotated token file is used without a restart.

Invariants: bad settings are a ``BrokerClientConfigError`` at start-up, never a failure of a
later call; the token never appears in a log line or ``repr``.
Must not know: HTTP sessions, the load manager, which calls are made.
"""

from __future__ import annotations

import base64
import json
import pathlib
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Any

TOKEN_PLUGINS = frozenset(
    {"token", "org.apache.pulsar.client.impl.auth.AuthenticationToken", "AuthenticationToken"}
)
TLS_PLUGINS = frozenset(
    {"tls", "org.apache.pulsar.client.impl.auth.AuthenticationTls", "AuthenticationTls"}
)
BASIC_PLUGINS = frozenset(
    {"basic", "org.apache.pulsar.client.impl.auth.AuthenticationBasic", "AuthenticationBasic"}
)


class BrokerClientConfigError(ValueError):
    """The broker-client settings cannot be used (unknown plugin, missing token or file)."""


def _parse_params(raw: str) -> dict[str, str]:
    """Pulsar's two spellings of authentication parameters: JSON, or ``k1:v1,k2:v2``."""
    text = raw.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise BrokerClientConfigError(
                f"brokerClientAuthenticationParameters is not valid JSON: {exc}"
            ) from None
        if not isinstance(data, dict):
            raise BrokerClientConfigError("brokerClientAuthenticationParameters: a JSON object")
        return {str(k): str(v) for k, v in data.items()}
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition(":")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def _file_path(uri: str) -> str:
    parsed = urllib.parse.urlsplit(uri)
    return urllib.parse.unquote(parsed.path) if parsed.scheme == "file" else uri


@dataclass(frozen=True, slots=True)
class BrokerClientAuth:
    """What every broker-to-broker HTTP request carries. ``token`` is a literal token;
    ``token_file`` a file read per request (one of them, or neither)."""

    token: str = ""
    token_file: str = ""
    basic: str = ""
    """``base64(user:password)`` for ``Authorization: Basic`` (the basic plugin)."""
    tls_enabled: bool = False
    trust_certs_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    def __repr__(self) -> str:
        kind = "token" if self.token else f"token file {self.token_file}" if self.token_file else ""
        kind = kind or ("basic" if self.basic else "")
        kind = kind or (f"certificate {self.cert_file}" if self.cert_file else "anonymous")
        return f"<BrokerClientAuth {kind} tls={self.tls_enabled}>"

    @classmethod
    def from_config(cls, config: object) -> BrokerClientAuth:
        """From a ``BrokerConfig`` (duck-typed so this module does not import it)."""
        get = config.__getattribute__
        return cls.from_settings(
            str(get("broker_client_authentication_plugin")),
            str(get("broker_client_authentication_parameters")),
            tls_enabled=bool(get("broker_client_tls_enabled")),
            trust_certs_file=str(get("broker_client_trust_certs_file_path")),
            cert_file=str(get("broker_client_certificate_file_path")),
            key_file=str(get("broker_client_key_file_path")),
        )

    @classmethod
    def from_settings(
        cls,
        plugin: str,
        parameters: str,
        *,
        tls_enabled: bool = False,
        trust_certs_file: str = "",
        cert_file: str = "",
        key_file: str = "",
    ) -> BrokerClientAuth:
        """From Pulsar's plugin name and parameters (a broker's ``brokerClient*`` settings,
        or a remote cluster's ``ClusterData``) and TLS files; files are checked now."""
        plugin = plugin.strip()
        raw = parameters
        cert, key = cert_file, key_file
        token = token_file = basic = ""
        if plugin in TOKEN_PLUGINS:
            token, token_file = _token_of(raw)
        elif plugin in BASIC_PLUGINS:
            params = _parse_params(raw)
            if not params.get("userId"):
                raise BrokerClientConfigError(
                    "brokerClientAuthenticationPlugin=basic needs "
                    'brokerClientAuthenticationParameters={"userId": ..., "password": ...}'
                )
            pair = f"{params['userId']}:{params.get('password', '')}".encode()
            basic = base64.b64encode(pair).decode()
        elif plugin in TLS_PLUGINS:
            params = _parse_params(raw)
            cert = params.get("tlsCertFile", cert)
            key = params.get("tlsKeyFile", key)
            if not cert or not key:
                raise BrokerClientConfigError(
                    "brokerClientAuthenticationPlugin=tls needs a certificate and key: "
                    "brokerClientAuthenticationParameters=tlsCertFile:/path,tlsKeyFile:/path "
                    "(or brokerClientCertificateFilePath / brokerClientKeyFilePath)"
                )
        elif plugin:
            raise BrokerClientConfigError(
                f"brokerClientAuthenticationPlugin {plugin!r} is not supported (token, tls, "
                "basic, or Pulsar's AuthenticationToken / AuthenticationTls / "
                "AuthenticationBasic class names)"
            )
        auth = cls(
            token=token,
            token_file=_file_path(token_file) if token_file else "",
            basic=basic,
            tls_enabled=tls_enabled,
            trust_certs_file=trust_certs_file,
            cert_file=_file_path(cert) if cert else "",
            key_file=_file_path(key) if key else "",
        )
        auth.ssl_context()  # fail at start-up on unreadable files, not on the first call
        if auth.token_file:
            auth.headers()
        return auth

    def current_token(self) -> str:
        """The token to present now ("" without one); a token file is read again each time,
        so a rotated token is used without a restart."""
        if not self.token_file:
            return self.token
        try:
            return pathlib.Path(self.token_file).read_text().strip()
        except OSError as exc:
            raise BrokerClientConfigError(
                f"cannot read the broker client token file {self.token_file}: {exc}"
            ) from None

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header (empty without credentials)."""
        if self.basic:
            return {"Authorization": f"Basic {self.basic}"}
        token = self.current_token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client context for HTTPS calls: the trusted CA, and this broker's certificate
        when it authenticates with TLS. Host names are not checked (Pulsar's default,
        ``tlsHostnameVerificationEnabled=false``); the chain is."""
        if not (self.tls_enabled or self.cert_file):
            return None
        try:
            ctx = ssl.create_default_context(cafile=self.trust_certs_file or None)
            ctx.check_hostname = False
            if self.cert_file:
                ctx.load_cert_chain(self.cert_file, self.key_file or None)
        except (OSError, ssl.SSLError) as exc:
            raise BrokerClientConfigError(
                f"broker client TLS files (brokerClientTrustCertsFilePath, "
                f"brokerClientCertificateFilePath, brokerClientKeyFilePath): {exc}"
            ) from None
        return ctx

    def request_options(self) -> dict[str, Any]:
        """Keyword arguments for an aiohttp request: ``headers`` and ``ssl``."""
        ctx = self.ssl_context()
        return {"headers": self.headers(), "ssl": ctx if ctx is not None else True}

    def pick_url(self, http_url: str, http_url_tls: str) -> str:
        """The URL of another broker to call: HTTPS when TLS is on and it serves HTTPS."""
        return http_url_tls if self.tls_enabled and http_url_tls else http_url


def _token_of(raw: str) -> tuple[str, str]:
    """(token, token file) from Pulsar's AuthenticationToken parameters: ``token:XXX``,
    ``file:///path``, JSON ``{"token": ...}`` / ``{"file": ...}``, or the token itself."""
    text = raw.strip()
    if text.startswith("{"):
        params = _parse_params(text)
        text = params.get("token", "") or (
            "file:" + params["file"].removeprefix("file:") if "file" in params else ""
        )
    if text.startswith("token:"):
        text = text.removeprefix("token:").strip()
        if text:
            return text, ""
    elif text.startswith("file:"):
        return "", text
    elif text:
        return text, ""
    raise BrokerClientConfigError(
        "brokerClientAuthenticationPlugin=token needs brokerClientAuthenticationParameters "
        "(token:<jwt> or file:///path/to/token)"
    )


__all__ = [
    "BASIC_PLUGINS",
    "TLS_PLUGINS",
    "TOKEN_PLUGINS",
    "BrokerClientAuth",
    "BrokerClientConfigError",
]

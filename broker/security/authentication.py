"""Authentication: who is this client? (Pulsar's ``AuthenticationService`` and providers).

Owns: the configured providers (``token``: JWTs validated by ``tokens.TokenValidator``;
``tls``: the role is the CN of a verified client certificate; ``basic``: user and password
checked against ``basic.PasswordFile``, the role is the user), authenticating a CONNECT
(``auth_method_name`` + ``auth_data``) or an HTTP request (``Authorization: Bearer`` or
``Basic``, or the client certificate), the anonymous role (``anonymousUserRole``: a client
naming no method, or a method no provider is configured for, as Pulsar's ``ServerCnx``; a
configured provider that refuses the credentials is a refusal), and the per-connection refresh
state machine (``ConnectionAuth``): when the role's credentials have expired at a refresh
check, the broker sends AUTH_CHALLENGE, the client answers AUTH_RESPONSE with fresh
credentials; a client that cannot refresh, does not answer before the next check, or answers
with bad or other-role credentials is disconnected. Pulsar checks every
``authenticationRefreshCheckSeconds``.

Errors: every failure is an ``AuthenticationError`` whose ``message`` is what the client sees
(Pulsar's generic "Unable to authenticate"; the reason goes to the log only).
Must not know: the wire format, topics, permissions.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.broker.errors import BrokerError, ServerError
from magnetar.broker.security.basic import PasswordFile, decode_http, split_credentials
from magnetar.broker.security.tokens import TokenError, TokenValidator, read_key_bytes

log = logging.getLogger(__name__)

CLIENT_MESSAGE = "Unable to authenticate"
REFRESH_AUTH_DATA = b"refresh"  # Pulsar's AuthData.REFRESH_AUTH_DATA
_PROVIDER_NAMES = {
    "token": "token",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": "token",
    "tls": "tls",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": "tls",
    "basic": "basic",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": "basic",
}


class AuthenticationError(BrokerError):
    """Authentication failed: ``reason`` for the log, ``message`` for the client."""

    code = ServerError.AuthenticationError

    def __init__(self, reason: str, message: str = CLIENT_MESSAGE) -> None:
        super().__init__(message)
        self.args = (reason,)  # str(exc) is the reason (for the log); .message the client's
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Authenticated:
    role: str
    method: str
    expires_at_ms: int | None = None  # None: the credentials never expire


def role_of_certificate(cert: dict[str, Any] | None) -> str | None:
    """The subject CN of a verified peer certificate (``SSLObject.getpeercert()``)."""
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    return None


class AuthenticationService:
    def __init__(
        self,
        *,
        enabled: bool = False,
        token: TokenValidator | None = None,
        tls: bool = False,
        basic: PasswordFile | None = None,
        anonymous_role: str = "",
        refresh_check_s: float = 60.0,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.enabled = enabled
        self.token = token
        self.tls = tls
        self.basic = basic
        self.anonymous_role = anonymous_role
        self.refresh_check_s = refresh_check_s
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.failures = 0  # pulsar_authentication_failures_total

    def __repr__(self) -> str:
        methods = [
            m for m, on in (("token", self.token), ("tls", self.tls), ("basic", self.basic)) if on
        ]
        return f"<AuthenticationService enabled={self.enabled} methods={methods}>"

    @classmethod
    def from_config(cls, config: Any) -> AuthenticationService:
        if not config.authentication_enabled:
            return cls()
        names = [n.strip() for n in config.authentication_providers.split(",") if n.strip()]
        unknown = [n for n in names if n not in _PROVIDER_NAMES]
        if unknown:
            raise ValueError(f"authentication_providers: unknown provider(s) {', '.join(unknown)}")
        kinds = {_PROVIDER_NAMES[n] for n in names}
        if not kinds:
            raise ValueError(
                "authentication_enabled needs authentication_providers (token, tls, basic)"
            )
        token = None
        if "token" in kinds:
            try:
                token = TokenValidator(
                    secret_key=read_key_bytes(config.token_secret_key)
                    if config.token_secret_key
                    else None,
                    public_key=read_key_bytes(config.token_public_key)
                    if config.token_public_key
                    else None,
                    public_alg=config.token_public_alg,
                    role_claim=config.token_auth_claim,
                    audience_claim=config.token_audience_claim,
                    audience=config.token_audience,
                )
            except TokenError as exc:
                raise ValueError(f"token authentication: {exc}") from None
        basic = None
        if "basic" in kinds:
            if not config.basic_auth_conf:
                raise ValueError("basic authentication needs basic_auth_conf (basicAuthConf)")
            basic = PasswordFile.from_conf(config.basic_auth_conf)
        return cls(
            enabled=True,
            token=token,
            tls="tls" in kinds,
            basic=basic,
            anonymous_role=config.anonymous_user_role,
            refresh_check_s=float(config.authentication_refresh_check_seconds),
        )

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ deciding
    def authenticate(
        self, method: str, data: bytes, peer_cert: dict[str, Any] | None = None
    ) -> Authenticated:
        """The role for CONNECT/AUTH_RESPONSE credentials; ``AuthenticationError`` if none."""
        try:
            return self._authenticate(method, data, peer_cert)
        except AuthenticationError:
            self.failures += 1
            raise

    def _authenticate(
        self, method: str, data: bytes, peer_cert: dict[str, Any] | None
    ) -> Authenticated:
        if method == "token" and self.token is not None:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise AuthenticationError("token is not UTF-8") from None
            text = text.removeprefix("Bearer ")
            try:
                claims = self.token.validate(text.strip())
            except TokenError as exc:
                raise AuthenticationError(str(exc)) from None
            return Authenticated(claims.role, "token", claims.expires_at_ms)
        if method == "basic" and self.basic is not None:
            try:
                user, password = split_credentials(data)
            except ValueError as exc:
                raise AuthenticationError(str(exc)) from None
            if not self.basic.check(user, password):
                raise AuthenticationError(f"unknown user or invalid password for {user!r}")
            return Authenticated(user, "basic")
        if method == "tls" and self.tls:
            role = role_of_certificate(peer_cert)
            if role is None:
                raise AuthenticationError("no verified client certificate with a CN")
            return Authenticated(role, "tls")
        tls_only = method in ("", "none") and self.tls and not self.anonymous_role
        if tls_only and role_of_certificate(peer_cert):
            return self._authenticate("tls", b"", peer_cert)
        if self.anonymous_role:
            # no provider of that name (none, or a method not configured): Pulsar's ServerCnx
            # gives the anonymous role, whose grants then decide
            return Authenticated(self.anonymous_role, "none")
        raise AuthenticationError(f"authentication method {method!r} is not enabled")

    def authenticate_http(
        self, authorization: str | None, peer_cert: dict[str, Any] | None
    ) -> Authenticated:
        """The role of an HTTP request (``Authorization: Bearer``, else the client cert)."""
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() == "bearer":
                return self.authenticate("token", value.strip().encode(), peer_cert)
            if scheme.lower() == "basic" and self.basic is not None:
                try:
                    credentials = decode_http(value)
                except ValueError as exc:
                    self.failures += 1
                    raise AuthenticationError(str(exc)) from None
                return self.authenticate("basic", credentials, peer_cert)
            self.failures += 1
            raise AuthenticationError(f"unsupported Authorization scheme {scheme!r}")
        return self.authenticate("none", b"", peer_cert)


class AuthState(enum.Enum):
    AUTHENTICATED = "authenticated"
    CHALLENGED = "challenged"  # AUTH_CHALLENGE sent, waiting for AUTH_RESPONSE


class RefreshAction(enum.Enum):
    NONE = "none"
    CHALLENGE = "challenge"  # send AUTH_CHALLENGE(refresh)
    CLOSE = "close"  # disconnect: cannot refresh, or no answer in time


class ConnectionAuth:
    """One connection's authenticated role and its refresh state (sans I/O)."""

    def __init__(
        self, service: AuthenticationService, who: Authenticated, supports_refresh: bool
    ) -> None:
        self.service = service
        self.who = who
        self.supports_refresh = supports_refresh
        self.state = AuthState.AUTHENTICATED

    @property
    def role(self) -> str:
        return self.who.role

    def expired(self) -> bool:
        exp = self.who.expires_at_ms
        return exp is not None and exp <= self.service.now_ms()

    def on_refresh_check(self) -> RefreshAction:
        if self.state is AuthState.CHALLENGED:
            return RefreshAction.CLOSE  # the previous challenge went unanswered
        if not self.expired():
            return RefreshAction.NONE
        if not self.supports_refresh:
            return RefreshAction.CLOSE
        self.state = AuthState.CHALLENGED
        return RefreshAction.CHALLENGE

    def on_auth_response(
        self, method: str, data: bytes, peer_cert: dict[str, Any] | None = None
    ) -> None:
        """Fresh credentials: accepted, or ``AuthenticationError`` (then disconnect)."""
        if self.state is not AuthState.CHALLENGED:
            raise AuthenticationError("AUTH_RESPONSE without a challenge")
        fresh = self.service.authenticate(method, data, peer_cert)
        if fresh.role != self.who.role:
            raise AuthenticationError(
                f"refreshed credentials are for role {fresh.role!r}, not {self.who.role!r}"
            )
        self.who = fresh
        self.state = AuthState.AUTHENTICATED


__all__ = [
    "CLIENT_MESSAGE",
    "REFRESH_AUTH_DATA",
    "AuthState",
    "Authenticated",
    "AuthenticationError",
    "AuthenticationService",
    "ConnectionAuth",
    "RefreshAction",
    "role_of_certificate",
]

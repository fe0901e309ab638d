"""JSON Web Tokens as Pulsar uses them (``AuthTokenUtils`` / ``AuthenticationProviderToken``).

Owns: generating keys (an HMAC secret, an RSA or EC key pair), reading keys given as Pulsar
does (``file:///path``, ``data:;base64,...``, a plain path, or bare base64; DER as Pulsar's
``pulsar tokens`` writes them, or PEM), creating a token for a role (claim ``sub``) with an
optional expiry, and validating a token: signature, algorithm, expiry (against an injected
clock), optional audience, and the role claim.

Errors: every failure to validate is a ``TokenError`` with a short reason (what Pulsar logs);
PyJWT and cryptography exceptions never escape this module.
Must not know: connections, HTTP, configuration objects.
"""

from __future__ import annotations

import base64
import binascii
import os
import pathlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

HMAC_ALGS = ("HS256", "HS384", "HS512")
RSA_ALGS = ("RS256", "RS384", "RS512")
EC_ALGS = ("ES256", "ES384", "ES512")
_EC_CURVES: dict[str, Callable[[], ec.EllipticCurve]] = {
    "ES256": ec.SECP256R1,
    "ES384": ec.SECP384R1,
    "ES512": ec.SECP521R1,
}
_SECRET_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
TOKEN_BYTES_MAX = 64 * 1024
"""Longer credentials are refused before any parsing (a token is a few hundred bytes)."""


class TokenError(Exception):
    """A token or key that cannot be used; ``str()`` is the reason."""


@dataclass(frozen=True, slots=True)
class TokenClaims:
    role: str
    expires_at_ms: int | None  # None: never expires
    claims: dict[str, Any]


# ---------------------------------------------------------------------------- keys
def read_key_bytes(value: str) -> bytes:
    """The key bytes named by a Pulsar key setting (``tokenSecretKey``/``tokenPublicKey``)."""
    value = value.strip()
    if not value:
        raise TokenError("no key configured")
    if value.startswith("data:"):
        _, _, payload = value.partition(",")
        header = value[: value.find(",")] if "," in value else value
        if ";base64" in header:
            return _b64(payload)
        return unquote(payload).encode()
    if value.startswith("file:"):
        path = unquote(urlparse(value).path)
        return _read_file(path)
    if os.path.exists(value):
        return _read_file(value)
    return _b64(value)


def _read_file(path: str) -> bytes:
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise TokenError(f"cannot read key file {path}: {exc.strerror}") from None


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise TokenError("key is neither a file, a data: URL nor base64") from None


def generate_secret_key(alg: str = "HS256") -> bytes:
    if alg not in _SECRET_BYTES:
        raise TokenError(f"unsupported secret-key algorithm {alg} (use {', '.join(HMAC_ALGS)})")
    return os.urandom(_SECRET_BYTES[alg])


def generate_key_pair(alg: str = "RS256") -> tuple[bytes, bytes]:
    """(private key PKCS#8 DER, public key X.509 DER), as ``pulsar tokens create-key-pair``."""
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if alg in RSA_ALGS:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg in EC_ALGS:
        private = ec.generate_private_key(_EC_CURVES[alg]())
    else:
        raise TokenError(f"unsupported key-pair algorithm {alg} (use RS256 or ES256)")
    priv = private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    pub = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return priv, pub


def load_private_key(raw: bytes) -> Any:
    try:
        if raw.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_private_key(raw, password=None)
        return serialization.load_der_private_key(raw, password=None)
    except (ValueError, TypeError) as exc:
        raise TokenError(f"cannot load the private key: {exc}") from None


def load_public_key(raw: bytes) -> Any:
    try:
        if raw.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_public_key(raw)
        return serialization.load_der_public_key(raw)
    except (ValueError, TypeError) as exc:
        raise TokenError(f"cannot load the public key: {exc}") from None


def _alg_for_private_key(key: Any) -> str:
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return {256: "ES256", 384: "ES384", 521: "ES512"}.get(key.curve.key_size, "ES256")
    raise TokenError("unsupported private key type")


# ---------------------------------------------------------------------------- durations
_DURATION = re.compile(r"^\s*(\d+)\s*([smhdwy]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_duration_s(text: str) -> int:
    """Pulsar's relative time (``RelativeTimeUtil``): ``30s``, ``10m``, ``3h``, ``7d``, ``1y``."""
    m = _DURATION.match(text)
    if m is None:
        raise TokenError(f"invalid duration {text!r} (e.g. 3600s, 30m, 12h, 7d, 1y)")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


# ---------------------------------------------------------------------------- tokens
def create_token(
    subject: str,
    *,
    secret_key: bytes | None = None,
    private_key: bytes | None = None,
    alg: str | None = None,
    expires_in_s: int | None = None,
    now_s: float | None = None,
    headers: dict[str, Any] | None = None,
) -> str:
    """A signed token for ``subject`` (the role), as ``pulsar tokens create``."""
    if (secret_key is None) == (private_key is None):
        raise TokenError("give exactly one of a secret key or a private key")
    claims: dict[str, Any] = {"sub": subject}
    if expires_in_s is not None:
        claims["exp"] = int((time.time() if now_s is None else now_s) + expires_in_s)
    key: Any
    if secret_key is not None:
        alg = alg or "HS256"
        if alg not in HMAC_ALGS:
            raise TokenError(f"{alg} is not an HMAC algorithm")
        key = secret_key
    else:
        assert private_key is not None
        key = load_private_key(private_key)
        alg = alg or _alg_for_private_key(key)
    try:
        return jwt.encode(claims, key, algorithm=alg, headers=headers)
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        raise TokenError(f"cannot sign: {exc}") from None


def show_token(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, claims) without validating anything (``pulsar tokens show``)."""
    try:
        header = jwt.get_unverified_header(token)
        body = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise TokenError(f"malformed token: {exc}") from None
    return dict(header), dict(body)


class TokenValidator:
    """Validates tokens against one key (a secret, or a public key and its algorithm)."""

    def __init__(
        self,
        *,
        secret_key: bytes | None = None,
        public_key: bytes | None = None,
        public_alg: str = "RS256",
        role_claim: str = "sub",
        audience_claim: str = "aud",
        audience: str = "",
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        if (secret_key is None) == (public_key is None):
            raise TokenError("configure exactly one of token_secret_key or token_public_key")
        if secret_key is not None:
            self._key: Any = secret_key
            self._algs: list[str] = list(HMAC_ALGS)
        else:
            assert public_key is not None
            if public_alg not in RSA_ALGS + EC_ALGS:
                raise TokenError(f"token_public_alg {public_alg} is not RS*/ES*")
            self._key = load_public_key(public_key)
            if isinstance(self._key, rsa.RSAPublicKey):
                self._algs = list(RSA_ALGS)
            elif isinstance(self._key, ec.EllipticCurvePublicKey):
                self._algs = list(EC_ALGS)
            else:
                raise TokenError("the public key is neither RSA nor EC")
            if public_alg not in self._algs:
                raise TokenError(
                    f"token_public_alg {public_alg} does not fit the public key "
                    f"({'/'.join(self._algs)})"
                )
        self.role_claim = role_claim or "sub"
        self.audience_claim = audience_claim or "aud"
        self.audience = audience
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))

    def validate(self, token: str) -> TokenClaims:
        if not token:
            raise TokenError("No token credentials passed")
        if len(token) > TOKEN_BYTES_MAX:
            raise TokenError("token too long")
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=self._algs,
                options={
                    "verify_exp": False,
                    "verify_aud": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.InvalidAlgorithmError:
            raise TokenError("token signed with an algorithm this broker does not accept") from None
        except jwt.InvalidSignatureError:
            raise TokenError("JWT signature does not match") from None
        except jwt.PyJWTError as exc:
            raise TokenError(f"malformed token: {exc}") from None
        except (ValueError, TypeError) as exc:  # odd keys/inputs deep in cryptography
            raise TokenError(f"malformed token: {exc}") from None
        expires_at_ms: int | None = None
        if "exp" in claims:
            exp = claims["exp"]
            if not isinstance(exp, int | float) or isinstance(exp, bool):
                raise TokenError("exp claim is not a number")
            expires_at_ms = int(exp * 1000)
            if expires_at_ms <= self._now_ms():
                raise TokenError("JWT expired")
        if self.audience:
            aud = claims.get(self.audience_claim)
            auds = aud if isinstance(aud, list) else [aud]
            if self.audience not in auds:
                raise TokenError("JWT audience does not match")
        role = claims.get(self.role_claim)
        if not isinstance(role, str) or not role:
            raise TokenError(f"token has no {self.role_claim!r} role claim")
        return TokenClaims(role, expires_at_ms, dict(claims))


__all__ = [
    "EC_ALGS",
    "HMAC_ALGS",
    "RSA_ALGS",
    "TokenClaims",
    "TokenError",
    "TokenValidator",
    "create_token",
    "generate_key_pair",
    "generate_secret_key",
    "load_private_key",
    "load_public_key",
    "parse_duration_s",
    "read_key_bytes",
    "show_token",
]

"""The admin REST transport: JSON over urllib (stdlib keeps start-up fast).

Owns: ``AdminHttp`` (one base URL, an optional bearer token, TLS options, a request timeout)
and the translation of transport failures into magctl errors: an HTTP error status becomes
``HttpError`` (status and the server's ``reason``), an unreachable server ``ConnectionFailed``
with kubectl's wording. A 307/308 (a broker that does not own the topic sends the request to
the one that does, as Pulsar's brokers do) is followed for every method, with the same body
and ``Authorization``, at most ``REDIRECTS_MAX`` times, as pulsar-admin follows it.
Must not know: resources, verbs or output.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from magnetar.client.magctl.errors import ConnectionFailed, UsageError

REDIRECTS_MAX = 5


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects surface as ``HTTPError`` so ``AdminHttp.request`` follows them itself:
    urllib follows a 307 only for GET, and would drop a PUT's body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class HttpError(Exception):
    """The admin API answered ``status`` (>= 400) with ``reason`` (its JSON ``reason``)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


def reason_of(status: int, raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text or f"HTTP {status}"
    if isinstance(data, dict):
        for key in ("reason", "message", "error"):
            if isinstance(data.get(key), str):
                return str(data[key])
    return text


def _check_url(url: str) -> None:
    """An admin URL is ``http(s)://host[:port][/prefix]``: anything else is a usage error
    before any request (urllib would fail later with its own exception types)."""
    bad = UsageError(f'invalid admin URL "{url}": expected http://host:port or https://...')
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # ValueError for a port that is not a number or out of range
    except ValueError:
        raise bad from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad


class AdminHttp:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        basic: tuple[str, str] | None = None,
        timeout_s: float = 30.0,
        tls_insecure: bool = False,
        tls_ca_file: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        _check_url(self.base_url)
        self.token = token
        self.basic = basic
        self.authorization: str | None = None
        """The ``Authorization`` header: the bearer token, else basic user and password."""
        if token:
            self.authorization = f"Bearer {token}"
        elif basic is not None:
            pair = base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
            self.authorization = f"Basic {pair}"
        self.timeout_s = timeout_s
        self._context: ssl.SSLContext | None = None
        if self.base_url.startswith("https://"):
            try:
                ctx = ssl.create_default_context(cafile=tls_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise UsageError(f"cannot use certificate-authority {tls_ca_file}: {exc}") from None
            if tls_insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._context = ctx
        self._opener = urllib.request.build_opener(
            _NoRedirect(), urllib.request.HTTPSHandler(context=self._context)
        )

    def __repr__(self) -> str:
        return f"AdminHttp({self.base_url!r})"

    def _send(self, method: str, url: str, data: bytes | None) -> bytes:
        """The answer's body, following redirects; ``HttpError`` for an error status."""
        for hop in range(REDIRECTS_MAX + 1):
            try:
                req = urllib.request.Request(url, data=data, method=method)
            except ValueError:
                raise UsageError(
                    f'invalid admin URL "{self.base_url}": expected http://host:port or https://...'
                ) from None
            req.add_header("Accept", "application/json")
            if data is not None:
                req.add_header("Content-Type", "application/json")
            if self.authorization:
                req.add_header("Authorization", self.authorization)
            try:
                with self._opener.open(req, timeout=self.timeout_s) as r:
                    payload: bytes = r.read()
                    return payload
            except urllib.error.HTTPError as exc:
                location = exc.headers.get("Location") if exc.code in (307, 308) else None
                if location is None or hop == REDIRECTS_MAX:
                    raise HttpError(exc.code, reason_of(exc.code, exc.read())) from None
                url = urllib.parse.urljoin(url, location)
        raise AssertionError("unreachable")

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        raw: bool = False,
    ) -> Any:
        """One request; the decoded JSON answer (None when empty), or the bytes if ``raw``."""
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(
                {k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()}
            )
        data = None if body is None else json.dumps(body).encode()
        try:
            payload = self._send(method, url, data)
        except (TimeoutError, urllib.error.URLError, OSError) as exc:
            where = urllib.parse.urlsplit(self.base_url).netloc or self.base_url
            cause = getattr(exc, "reason", exc)
            if isinstance(cause, ssl.SSLCertVerificationError):
                raise ConnectionFailed(
                    f"the server {where}'s certificate is not trusted ({cause.verify_message}): "
                    "set certificate-authority (or insecure-skip-tls-verify) in the context"
                ) from None
            if isinstance(cause, ConnectionRefusedError):
                raise ConnectionFailed(
                    f"The connection to the server {where} was refused - "
                    "did you specify the right host or port?"
                ) from None
            if isinstance(cause, socket.timeout | TimeoutError):
                raise ConnectionFailed(
                    f"the server {where} did not answer within {self.timeout_s:g} s "
                    "(--request-timeout)"
                ) from None
            raise ConnectionFailed(f"cannot reach the server {where}: {cause}") from None
        if raw:
            return payload
        if not payload.strip():
            return None
        try:
            return json.loads(payload)
        except ValueError:
            return payload.decode("utf-8", "replace")

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query or None)

    def put(self, path: str, body: Any = None, **query: Any) -> Any:
        return self.request("PUT", path, body, query=query or None)

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        return self.request("POST", path, body, query=query or None)

    def delete(self, path: str, **query: Any) -> Any:
        return self.request("DELETE", path, query=query or None)


__all__ = ["AdminHttp", "HttpError", "reason_of"]

"""Connection pool: one handshaken connection per (logical broker URL, physical URL).

Owns: parsing service URLs (``pulsar://h:p[,h2:p2]``, ``pulsar+ssl://``), the TLS context, and
the map of open connections. Concurrent ``get`` calls for the same key share one connection
attempt. A closed connection is dropped from the map, so the next ``get`` opens a new one.

Must not know: lookup, producers, consumers.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from magnetar.client._config import Authentication
from magnetar.client._connection import ClientConnection
from magnetar.client._errors import InvalidUrl
from magnetar.clock import Clock


@dataclass(frozen=True, slots=True)
class ServiceAddress:
    scheme: str  # pulsar | pulsar+ssl | http | https
    hosts: tuple[tuple[str, int], ...]

    @property
    def use_tls(self) -> bool:
        return self.scheme in ("pulsar+ssl", "https")

    @property
    def is_http(self) -> bool:
        return self.scheme in ("http", "https")

    def url(self, index: int = 0) -> str:
        host, port = self.hosts[index % len(self.hosts)]
        return f"{self.scheme}://{host}:{port}"


_DEFAULT_PORTS = {"pulsar": 6650, "pulsar+ssl": 6651, "http": 8080, "https": 8443}


def parse_service_url(url: str) -> ServiceAddress:
    """``pulsar://a:6650,b:6650`` -> ServiceAddress; raises ``InvalidUrl``."""
    if "://" not in url:
        raise InvalidUrl(f"invalid service URL {url!r}")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InvalidUrl(f"unsupported scheme in {url!r}")
    rest = rest.split("/", 1)[0]
    hosts: list[tuple[str, int]] = []
    for part in rest.split(","):
        if not part:
            continue
        parsed = urlsplit(f"//{part}")
        if not parsed.hostname:
            raise InvalidUrl(f"invalid host in {url!r}")
        try:
            port = parsed.port or _DEFAULT_PORTS[scheme]
        except ValueError:
            raise InvalidUrl(f"invalid port in {url!r}") from None
        hosts.append((parsed.hostname, port))
    if not hosts:
        raise InvalidUrl(f"no host in {url!r}")
    return ServiceAddress(scheme, tuple(hosts))


@dataclass(frozen=True, slots=True)
class TlsOptions:
    trust_certs_file_path: str | None = None
    allow_insecure_connection: bool = False
    validate_hostname: bool = False
    certificate_file_path: str | None = None
    private_key_file_path: str | None = None

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.trust_certs_file_path)
        ctx.check_hostname = self.validate_hostname and not self.allow_insecure_connection
        if self.allow_insecure_connection:
            ctx.verify_mode = ssl.CERT_NONE
        if self.certificate_file_path:
            ctx.load_cert_chain(self.certificate_file_path, self.private_key_file_path)
        return ctx


class ConnectionPool:
    def __init__(
        self,
        *,
        clock: Clock,
        auth: Authentication | None,
        tls: TlsOptions,
        connection_timeout_ms: int,
        operation_timeout_ms: int,
        keep_alive_interval_s: float,
    ) -> None:
        self._clock = clock
        self._auth = auth
        self._tls = tls
        self._ssl: ssl.SSLContext | None = None
        self._connection_timeout_ms = connection_timeout_ms
        self._operation_timeout_ms = operation_timeout_ms
        self._keep_alive_interval_s = keep_alive_interval_s
        self._connections: dict[tuple[str, str], ClientConnection] = {}
        self._opening: dict[tuple[str, str], asyncio.Task[ClientConnection]] = {}
        self._closed = False

    def __len__(self) -> int:
        return sum(1 for c in self._connections.values() if not c.closed.is_set())

    async def get(self, logical_url: str, physical_url: str | None = None) -> ClientConnection:
        physical_url = physical_url or logical_url
        key = (logical_url, physical_url)
        cnx = self._connections.get(key)
        if cnx is not None and not cnx.closed.is_set():
            return cnx
        task = self._opening.get(key)
        if task is None:
            task = asyncio.create_task(self._open(logical_url, physical_url))
            self._opening[key] = task
            task.add_done_callback(lambda _t: self._opening.pop(key, None))
        return await asyncio.shield(task)

    async def _open(self, logical_url: str, physical_url: str) -> ClientConnection:
        address = parse_service_url(physical_url)
        host, port = address.hosts[0]
        ctx = None
        if address.use_tls:
            if self._ssl is None:
                self._ssl = self._tls.context()
            ctx = self._ssl
        cnx = await ClientConnection.open(
            host,
            port,
            logical_url=logical_url,
            clock=self._clock,
            ssl_context=ctx,
            server_hostname=host,
            connection_timeout_ms=self._connection_timeout_ms,
            operation_timeout_ms=self._operation_timeout_ms,
            keep_alive_interval_s=self._keep_alive_interval_s,
            auth=self._auth,
            proxy_to_broker_url=(
                logical_url.split("://", 1)[1] if logical_url != physical_url else None
            ),
        )
        if self._closed:
            await cnx.close("pool closed")
            raise ConnectionError("pool closed")
        self._connections[(logical_url, physical_url)] = cnx
        return cnx

    async def close(self) -> None:
        self._closed = True
        for task in list(self._opening.values()):
            task.cancel()
        for cnx in list(self._connections.values()):
            await cnx.close("client closed")
        self._connections.clear()


__all__ = ["ConnectionPool", "ServiceAddress", "TlsOptions", "parse_service_url"]

"""One broker process's parts wired together: metadata, managed ledgers, service, HTTP.

Owns: building a ``BrokerService`` on managed ledgers over the bookies registered in the
metadata store (``BookieClient`` per bookie), serving the admin REST API / HTTP lookup /
metrics on the web port, logging setup, and orderly shutdown in reverse order. Used by
``magnetar broker`` (cluster) and ``magnetar standalone``.
Must not know: how the metadata store or the bookies were started.
"""

from __future__ import annotations

import gc
import json
import logging
import sys
import time
from typing import Any

from aiohttp import web

from magnetar.bookie.client import BookieClient
from magnetar.bookie.tls import GrpcTls
from magnetar.broker.config import BrokerConfig
from magnetar.broker.http_api import AdminApi
from magnetar.broker.http_security import add_permission_routes, security_middleware
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.broker.ledger_adapter import ManagedLedgerStorage
from magnetar.broker.service import BrokerService
from magnetar.zk.store import MetadataStore

log = logging.getLogger(__name__)


def managed_ledger_config(config: BrokerConfig) -> ManagedLedgerConfig:
    return ManagedLedgerConfig(
        ensemble_size=config.managed_ledger_default_ensemble_size,
        write_quorum=config.managed_ledger_default_write_quorum,
        ack_quorum=config.managed_ledger_default_ack_quorum,
        max_entries_per_ledger=config.managed_ledger_max_entries_per_ledger,
        max_ledger_rollover_time_ms=config.managed_ledger_max_ledger_rollover_time_minutes * 60_000,
        min_ledger_rollover_time_ms=config.managed_ledger_min_ledger_rollover_time_minutes * 60_000,
        retention_time_ms=config.default_retention_time_in_minutes * 60_000,
        retention_size_bytes=config.default_retention_size_in_mb << 20,
        entry_cache_bytes=config.managed_ledger_cache_size_mb << 20,
    )


def bookie_tls(config: BrokerConfig) -> GrpcTls | None:
    """The broker's TLS settings towards bookies (None: plain gRPC)."""
    if not config.bookkeeper_tls_trust_certs_file_path:
        return None
    client_auth = config.bookkeeper_tls_client_authentication
    return GrpcTls(
        config.bookkeeper_tls_certificate_file_path if client_auth else "",
        config.bookkeeper_tls_key_file_path if client_auth else "",
        config.bookkeeper_tls_trust_certs_file_path,
    )


class BrokerRuntime:
    """A broker on an open metadata store: ``await start()``, then ``await close()``."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, storage: Any = None) -> None:
        """``storage``: a ``TopicStorageFactory`` to use instead of managed ledgers on the
        registered bookies (tests serving topics from memory)."""
        self.config = config
        self.store = store
        self.factory = ManagedLedgerFactory(
            store, self._bookie_client, managed_ledger_config(config)
        )
        self.storage = storage if storage is not None else ManagedLedgerStorage(self.factory)
        self.service = BrokerService(config, store, self.storage)
        self._web: web.AppRunner | None = None
        self.web_port = config.web_service_port
        self.web_port_tls = config.web_service_port_tls

    def _bookie_client(self, address: str) -> BookieClient:
        return BookieClient(
            address, timeout_ms=5_000, add_timeout_ms=10_000, tls=bookie_tls(self.config)
        )

    async def start(self) -> None:
        await self.service.start()
        api = AdminApi(
            self.service.resources,
            self.service,
            default_bundles=self.config.default_number_of_namespace_bundles,
        )
        app = api.app()
        app.middlewares.append(security_middleware(self.service.authn, self.service.authz))
        add_permission_routes(app, self.service.authz)
        self._web = web.AppRunner(app, access_log=None)
        await self._web.setup()
        host = self.config.bind_address
        if self.config.web_service_port >= 0:
            site = web.TCPSite(self._web, host, self.config.web_service_port)
            await site.start()
            self.web_port = int(self._web.addresses[-1][1])
            self.service.set_web_service_url(
                f"http://{self.config.advertised_address}:{self.web_port}"
            )
        tls = self.service.tls
        if tls is not None and self.config.web_service_port_tls >= 0:
            site = web.TCPSite(
                self._web, host, self.config.web_service_port_tls, ssl_context=tls.front
            )
            await site.start()
            self.web_port_tls = int(self._web.addresses[-1][1])
            url = f"https://{self.config.advertised_address}:{self.web_port_tls}"
            self.service.set_web_service_url_tls(url)
            if self.config.web_service_port < 0:
                self.service.set_web_service_url(url)
        log.info(
            "broker ready service_url=%s web_url=http://%s:%d",
            self.service.service_url,
            self.config.advertised_address,
            self.web_port,
        )

    async def close(self) -> None:
        if self._web is not None:
            await self._web.cleanup()
            self._web = None
        await self.service.close()
        close = getattr(self.storage, "close", None)  # memory storage has none
        if close is not None:
            await close()


def tune_gc_for_serving() -> None:
    """Collect garbage rarely and never rescan start-up objects.

    A broker allocates many short-lived objects per message; with CPython's default
    thresholds ``bench/ledger_perf.py --gc`` measured 4-5 us of collection per add and a p99
    of ~90 ms, against ~0.04 us and 30-50 ms with a 50,000 young-generation threshold and
    the start-up heap frozen. Call once the process is serving.
    """
    gc.set_threshold(50_000, 20, 100)
    gc.freeze()


class _KeyValueFormatter(logging.Formatter):
    """``ts=... level=... logger=... msg="..."``: one line per record, grep-friendly."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = (
            f"ts={ts}.{int(record.msecs):03d}Z level={record.levelname} "
            f"logger={record.name} msg={json.dumps(record.getMessage())}"
        )
        if record.exc_info:
            line += " exc=" + json.dumps(self.formatException(record.exc_info))
        return line


def setup_logging(level: str = "INFO", extra: dict[str, Any] | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("kazoo").setLevel(logging.WARNING)


async def run_broker(config: BrokerConfig) -> int:
    """``magnetar broker``: serve until SIGTERM/SIGINT, then shut down in order."""
    import asyncio
    import signal

    from magnetar.zk.factory import open_metadata_store

    url = config.metadata_store_url
    options = (
        {"session_timeout_ms": config.metadata_store_session_timeout_millis}
        if url.startswith(("zk://", "embedded://"))
        else {}
    )
    store = await open_metadata_store(url, **options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        runtime = BrokerRuntime(config, store)
        await runtime.start()
    except ValueError as exc:  # unusable TLS/authentication settings
        print(f"magnetar broker: {exc}", file=sys.stderr)
        await store.close()
        return 2
    tune_gc_for_serving()
    print(
        f"Magnetar broker is ready\n  service URL: {runtime.service.service_url}\n"
        f"  admin URL:   http://{config.advertised_address}:{runtime.web_port}",
        flush=True,
    )
    await stop.wait()
    log.info("shutting down")
    await runtime.close()
    await store.close()
    return 0


__all__ = [
    "BrokerRuntime",
    "bookie_tls",
    "managed_ledger_config",
    "run_broker",
    "setup_logging",
    "tune_gc_for_serving",
]

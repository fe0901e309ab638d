"""The bookie's ``/metrics`` endpoint (Prometheus text format) on its HTTP port.

Owns: rendering the service's and the storage engine's ``statistics()`` and ``info()`` as
Prometheus gauges/counters named like BookKeeper's (``bookie_SERVER_STATUS``,
``bookkeeper_server_ADD_ENTRY_count``, ...) so existing dashboards fit, and a tiny aiohttp
server for ``GET /metrics`` and ``GET /health``. Values are read when scraped; nothing is
kept here. Must not know: how the numbers are produced.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from aiohttp import web

from magnetar.bookie.api import BookieStorage
from magnetar.bookie.server import BookieService

log = logging.getLogger(__name__)


def render(service: BookieService, storage: BookieStorage) -> str:
    lines: list[str] = []

    def metric(name: str, kind: str, value: float, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name} {value}")

    info = storage.info()
    stats = service.statistics()
    metric("bookie_SERVER_STATUS", "gauge", 0 if info.read_only else 1, "1 writable, 0 read-only")
    metric("bookie_ledger_dir_total_bytes", "gauge", info.total_disk_bytes, "disk size")
    metric("bookie_ledger_dir_free_bytes", "gauge", info.free_disk_bytes, "free disk")
    metric("bookie_journal_lag_bytes", "gauge", info.journal_lag_bytes, "journal bytes unsynced")
    metric(
        "bookkeeper_server_ADD_ENTRY_count",
        "counter",
        stats.add_entries_received,
        "entries received on Add streams",
    )
    metric(
        "bookkeeper_server_ADD_ENTRY_failed_count",
        "counter",
        stats.add_entries_failed,
        "entries answered with a non-OK status",
    )
    metric("bookkeeper_server_ADD_BATCH_count", "counter", stats.add_batches_received, "batches")
    metric("bookkeeper_server_READ_ENTRY_count", "counter", stats.reads, "read requests")
    metric("bookkeeper_server_BAD_REQUEST_count", "counter", stats.bad_requests, "bad requests")
    metric("bookie_add_streams", "gauge", stats.add_streams_open, "open Add streams")
    metric(
        "bookie_fast_add_connections",
        "gauge",
        stats.fast_add_connections_open,
        "open Add streams on the fast add port (also in bookie_add_streams)",
    )
    metric(
        "bookie_fast_add_BATCH_count",
        "counter",
        stats.fast_add_batches_received,
        "batches received on the fast add port (also in bookkeeper_server_ADD_BATCH_count)",
    )
    metric("bookie_WRITE_BYTES", "counter", stats.add_bytes_received, "bytes of entries added")
    metric("bookie_READ_BYTES", "counter", stats.read_bytes_sent, "bytes of entries read")
    from magnetar.bookie.core import Bookie

    if isinstance(storage, Bookie):
        core = storage.statistics()
        journal = storage.journal.statistics()
        metric("bookie_ledgers_count", "gauge", core.ledgers, "ledgers stored")
        metric(
            "bookie_journal_JOURNAL_WRITE_BYTES",
            "counter",
            journal.appended_bytes,
            "bytes appended to the journal",
        )
        metric(
            "bookie_journal_JOURNAL_SYNC_count",
            "counter",
            journal.syncs,
            "fdatasync calls of the journal",
        )
        metric(
            "bookie_journal_JOURNAL_FORCE_WRITE_GROUPING_count",
            "counter",
            journal.groups_synced,
            "group commits made durable",
        )
        metric(
            "bookie_journal_JOURNAL_QUEUE_SIZE",
            "gauge",
            journal.pending_groups,
            "groups waiting for their fdatasync",
        )
        metric(
            "bookie_journal_lag_bytes_synced",
            "gauge",
            journal.appended_bytes - journal.synced_bytes,
            "journal bytes not yet synced",
        )
    engine_stats = getattr(storage, "statistics", None)
    if callable(engine_stats):
        try:
            values: Any = engine_stats()
            if dataclasses.is_dataclass(values):
                for field in dataclasses.fields(values):
                    value = getattr(values, field.name)
                    if isinstance(value, bool):
                        value = int(value)
                    if isinstance(value, int | float):
                        metric(f"bookie_storage_{field.name}", "gauge", value, field.name)
        except Exception:
            log.exception("engine statistics failed")
    return "\n".join(lines) + "\n"


class MetricsServer:
    """``GET /metrics`` and ``GET /health`` on ``host:port``."""

    def __init__(
        self, service: BookieService, storage: BookieStorage, host: str, port: int
    ) -> None:
        self.service = service
        self.storage = storage
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=render(self.service, self.storage), content_type="text/plain", charset="utf-8"
        )

    async def _health(self, request: web.Request) -> web.Response:
        info = self.storage.info()
        return web.json_response({"serving": self.service.accepting, "read_only": info.read_only})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        log.info("metrics listening address=%s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


__all__ = ["MetricsServer", "render"]

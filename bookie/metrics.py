"""The bookie's ``/metrics`` endpoint (Prometheus text format) on its HTTP port.

Owns: ``BookieMetrics``, a prometheus-client collector (as the broker's ``BrokerMetrics``)
over the service's and the disk engine's ``statistics()`` and the storage's ``info()``, with
BookKeeper's names (``bookie_SERVER_STATUS``, ``bookkeeper_server_ADD_ENTRY_count``,
``bookie_WRITE_BYTES``, ...) so existing dashboards fit; ``exposition``, the text of a
registry; and a tiny aiohttp server for ``GET /metrics`` and ``GET /health``. Values are read
when scraped; nothing is kept here.
Why ``exposition`` and not prometheus-client's ``generate_latest``: BookKeeper's counters
carry no ``_total`` suffix, and that encoder (OpenMetrics' rule) names a counter family
``<name>_total`` in its TYPE line, which no longer matches the samples dashboards select.
``exposition`` writes the classic format with each family under its own name.
Must not know: how the numbers are produced.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from magnetar.bookie.api import BookieStorage
from magnetar.bookie.server import BookieService

if TYPE_CHECKING:
    from magnetar.bookie.core import Bookie

log = logging.getLogger(__name__)


def _gauge(name: str, documentation: str, value: float) -> Metric:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> Metric:
    """A counter under BookKeeper's name (no ``_total``)."""
    family = Metric(name, documentation, "counter")
    family.add_sample(name, {}, value)
    return family


class BookieMetrics:
    """The bookie's series (a prometheus-client collector)."""

    def __init__(
        self, service: BookieService, storage: BookieStorage, engine: Bookie | None = None
    ) -> None:
        self.service = service
        self.storage = storage
        self.engine = engine
        """The disk engine when it is the storage (its own and its journal's statistics)."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def __repr__(self) -> str:
        return f"BookieMetrics({self.service!r})"

    def collect(self) -> Iterator[Metric]:
        info = self.storage.info()
        stats = self.service.statistics()
        yield _gauge("bookie_SERVER_STATUS", "1 writable, 0 read-only", 0 if info.read_only else 1)
        yield _gauge("bookie_ledger_dir_total_bytes", "disk size", info.total_disk_bytes)
        yield _gauge("bookie_ledger_dir_free_bytes", "free disk", info.free_disk_bytes)
        yield _gauge("bookie_journal_lag_bytes", "journal bytes unsynced", info.journal_lag_bytes)
        yield _counter(
            "bookkeeper_server_ADD_ENTRY_count",
            "entries received on Add streams",
            stats.add_entries_received,
        )
        yield _counter(
            "bookkeeper_server_ADD_ENTRY_failed_count",
            "entries answered with a non-OK status",
            stats.add_entries_failed,
        )
        yield _counter("bookkeeper_server_ADD_BATCH_count", "batches", stats.add_batches_received)
        yield _counter("bookkeeper_server_READ_ENTRY_count", "read requests", stats.reads)
        yield _counter("bookkeeper_server_BAD_REQUEST_count", "bad requests", stats.bad_requests)
        yield _gauge("bookie_add_streams", "open Add streams", stats.add_streams_open)
        yield _gauge(
            "bookie_fast_add_connections",
            "open Add streams on the fast add port (also in bookie_add_streams)",
            stats.fast_add_connections_open,
        )
        yield _counter(
            "bookie_fast_add_BATCH_count",
            "batches received on the fast add port (also in bookkeeper_server_ADD_BATCH_count)",
            stats.fast_add_batches_received,
        )
        yield _counter("bookie_WRITE_BYTES", "bytes of entries added", stats.add_bytes_received)
        yield _counter("bookie_READ_BYTES", "bytes of entries read", stats.read_bytes_sent)
        background = self.service.background.statistics()
        yield _counter(
            "bookie_background_READ_count",
            "reads marked background (offloads; also in bookkeeper_server_READ_ENTRY_count)",
            background.reads,
        )
        yield _counter(
            "bookie_background_READ_PACED_count",
            "background reads that waited for their turn while adds came in",
            background.paced,
        )
        yield _counter(
            "bookie_background_READ_WAIT_seconds",
            "time background reads waited for their turn, added up",
            background.wait_s,
        )
        if self.engine is not None:
            yield from self._engine_series(self.engine)

    @staticmethod
    def _engine_series(engine: Bookie) -> Iterator[Metric]:
        core = engine.statistics()
        journal = engine.journal.statistics()
        yield _gauge("bookie_ledgers_count", "ledgers stored", core.ledgers)
        yield _counter(
            "bookie_journal_JOURNAL_WRITE_BYTES",
            "bytes appended to the journal",
            journal.appended_bytes,
        )
        yield _counter(
            "bookie_journal_JOURNAL_SYNC_count", "fdatasync calls of the journal", journal.syncs
        )
        yield _counter(
            "bookie_journal_JOURNAL_FORCE_WRITE_GROUPING_count",
            "group commits made durable",
            journal.groups_synced,
        )
        yield _gauge(
            "bookie_journal_JOURNAL_QUEUE_SIZE",
            "groups waiting for their fdatasync",
            journal.pending_groups,
        )
        yield _gauge(
            "bookie_journal_lag_bytes_synced",
            "journal bytes not yet synced",
            journal.appended_bytes - journal.synced_bytes,
        )
        for name, value in dataclasses.asdict(core).items():
            if isinstance(value, int | float):  # a bool is an int: 0 or 1
                yield _gauge(
                    f"bookie_storage_{name}", name, int(value) if isinstance(value, bool) else value
                )

    def render(self) -> str:
        return exposition(self.registry)


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _label_value(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def exposition(registry: CollectorRegistry) -> str:
    """The Prometheus text format (0.0.4) of ``registry``, each family under its own name."""
    lines: list[str] = []
    for family in registry.collect():
        lines.append(f"# HELP {family.name} {_help(family.documentation)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(sample.labels.items()))
            name = f"{sample.name}{{{labels}}}" if labels else sample.name
            lines.append(f"{name} {floatToGoString(sample.value)}")
    return "\n".join(lines) + "\n"


class MetricsServer:
    """``GET /metrics`` and ``GET /health`` on ``host:port``."""

    def __init__(
        self,
        service: BookieService,
        storage: BookieStorage,
        host: str,
        port: int,
        *,
        engine: Bookie | None = None,
    ) -> None:
        self.service = service
        self.storage = storage
        self.metrics = BookieMetrics(service, storage, engine)
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics.render(), content_type="text/plain", charset="utf-8")

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


__all__ = ["BookieMetrics", "MetricsServer", "exposition"]

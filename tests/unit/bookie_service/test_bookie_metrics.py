"""The bookie's ``/metrics`` text: built with prometheus-client (a collector, as the
broker's), exposed under BookKeeper's names exactly (counters without ``_total``, as
dashboards select them), typed, and carrying the service's numbers; parsed with
``prometheus_client.parser`` (never by substring)."""

from __future__ import annotations

import asyncio

import crc32c
from support.metrics import families, sample

from magnetar.bookie.client import encode_batch_header
from magnetar.bookie.metrics import BookieMetrics
from magnetar.bookie.server import BookieService
from magnetar.bookie.testing import MemoryBookieStorage
from magnetar.bookie.wire import pack_entries

COUNTERS = (
    "bookkeeper_server_ADD_ENTRY_count",
    "bookkeeper_server_ADD_ENTRY_failed_count",
    "bookkeeper_server_ADD_BATCH_count",
    "bookkeeper_server_READ_ENTRY_count",
    "bookkeeper_server_BAD_REQUEST_count",
    "bookie_fast_add_BATCH_count",
    "bookie_background_READ_count",
    "bookie_background_READ_PACED_count",
    "bookie_background_READ_WAIT_seconds",
    "bookie_WRITE_BYTES",
    "bookie_READ_BYTES",
)
GAUGES = (
    "bookie_SERVER_STATUS",
    "bookie_ledger_dir_total_bytes",
    "bookie_ledger_dir_free_bytes",
    "bookie_journal_lag_bytes",
    "bookie_add_streams",
    "bookie_fast_add_connections",
)


class _Entry:
    def __init__(self, entry_id: int, payload: bytes) -> None:
        self.entry_id, self.lac, self.payload = entry_id, entry_id - 1, payload
        self.crc32c = crc32c.crc32c(payload)


async def test_series_keep_bookkeeper_names_types_and_values() -> None:
    storage = MemoryBookieStorage("m")
    service = BookieService(storage)
    state = service.open_add_stream()
    parts, nbytes = pack_entries(1, [_Entry(e, b"x" * 10) for e in range(3)])
    header = encode_batch_header(1, b"k", False, nbytes)
    assert service.accept_batch(state, header + b"".join(parts))
    await asyncio.ensure_future(state.pending[0][3])  # type: ignore[arg-type]
    service.drain_done(state)
    text = BookieMetrics(service, storage).render()

    exposed = {line.split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
    assert set(COUNTERS) | set(GAUGES) <= exposed  # the names dashboards select, exactly
    fams = families(text)
    assert all(fams[name].type == "counter" for name in COUNTERS)  # type: ignore[attr-defined]
    assert all(fams[name].type == "gauge" for name in GAUGES)  # type: ignore[attr-defined]
    stats = service.statistics()
    assert sample(text, "bookkeeper_server_ADD_ENTRY_count") == stats.add_entries_received == 3
    assert sample(text, "bookkeeper_server_ADD_BATCH_count") == 1
    assert sample(text, "bookie_WRITE_BYTES") == stats.add_bytes_received == nbytes
    assert sample(text, "bookie_SERVER_STATUS") == 1
    assert sample(text, "bookie_add_streams") == 1
    assert "bookie_ledgers_count" not in fams  # no disk engine: no engine series
    storage.read_only = True
    assert sample(BookieMetrics(service, storage).render(), "bookie_SERVER_STATUS") == 0

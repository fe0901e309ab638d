"""A managed ledger's settings.

Owns: ``ManagedLedgerConfig`` (rollover limits, retention, the entry cache and read-ahead
bounds, cursor ledger limits, the broker's offload policies, the BookKeeper client's
settings it passes on) and the
``LedgerClientConfig`` derived from it. Must not know: anything but values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.broker.bookkeeper.context import LedgerClientConfig
from magnetar.broker.offload.policies import OffloadPolicies


@dataclass(frozen=True, slots=True)
class ManagedLedgerConfig:
    ensemble_size: int = 2
    write_quorum: int = 2
    ack_quorum: int = 2
    max_entries_per_ledger: int = 50_000
    max_size_per_ledger_bytes: int = 2 << 30
    max_ledger_rollover_time_ms: int = 240 * 60_000
    min_ledger_rollover_time_ms: int = 10 * 60_000
    rollover_check_interval_ms: int = 60_000
    retention_time_ms: int = 0
    """How long consumed ledgers are kept; -1 = forever, 0 = not at all."""
    retention_size_bytes: int = 0
    """How many bytes of consumed ledgers are kept; -1 = no limit, 0 = none."""
    entry_cache_bytes: int = 64 << 20
    """The broker-wide entry cache budget (the factory's config sets it; per-ledger configs
    do not: every managed ledger of a factory shares one ``EntryCacheManager``)."""
    entry_cache_eviction_watermark: float = 0.9
    """Over budget, evict down to this fraction of it (factory-wide)."""
    entry_cache_eviction_time_threshold_ms: int = 1000
    """Entries older than this are evicted (0 = no age eviction; factory-wide)."""
    entry_cache_eviction_interval_ms: int = 10
    """The age eviction runs at most this often (factory-wide)."""
    read_ahead_entries: int = 10_000
    """A cursor reading behind the entry cache keeps bookie reads in flight for up to this
    many entries past its read position (``ReadAhead``); 0 = one read at a time."""
    read_ahead_bytes: int = 4 << 20
    """... and for up to this many bytes (estimated from the ledger's average entry)."""
    read_ahead_total_bytes: int = 64 << 20
    """Every cursor's read-ahead of a factory together holds at most this many bytes
    (``ReadAheadBudget``; the factory's config sets it, as ``entry_cache_bytes``)."""
    cursor_backlogged_threshold: int = 1000
    """A cursor this many entries or more behind the last confirmed entry is not an active
    reader for caching: the cache does not keep entries for it."""
    max_pending_adds: int = 100_000
    cursor_snapshot_min_bytes: int = 1 << 20
    """A new cursor snapshot (and cursor ledger) once the deltas since the last one exceed
    this or the snapshot's own size, whichever is larger: bounds replay on recovery."""
    cursor_max_entries_per_ledger: int = 50_000
    """A cursor's ledger holding this many entries rolls over at the cursor's next write
    (Pulsar's ``managedLedgerCursorMaxEntriesPerLedger``)."""
    cursor_rollover_time_ms: int = 14_400_000
    """... and so does one started this long ago (``managedLedgerCursorRolloverTimeInSeconds``:
    4 hours)."""
    snapshot_chunk_bytes: int = 1 << 20
    add_timeout_ms: int = 3_000
    ensemble_change_timeout_ms: int = 10_000
    quarantine_ms: int = 30_000
    password: bytes = b""
    offload: OffloadPolicies = field(default_factory=OffloadPolicies)
    """The broker's offload policies (broker.conf): in force until the topic's own are
    applied (``Offloading.set_policies``); no driver = no offloading."""

    def ledger_client_config(self) -> LedgerClientConfig:
        return LedgerClientConfig(
            ensemble_size=self.ensemble_size,
            write_quorum=self.write_quorum,
            ack_quorum=self.ack_quorum,
            password=self.password,
            add_timeout_ms=self.add_timeout_ms,
            ensemble_change_timeout_ms=self.ensemble_change_timeout_ms,
            max_pending_adds=self.max_pending_adds,
            quarantine_ms=self.quarantine_ms,
        )


__all__ = ["ManagedLedgerConfig"]

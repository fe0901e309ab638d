"""The shapes the offloader exchanges with its caller (the managed ledger, in phase 2).

Owns: ``LedgerSource`` (what is offloaded: a sealed ledger with the read-handle shape),
``OffloadedLedger`` (what the managed ledger records after a verified upload: driver, where,
which attempt, sizes; JSON round trip with Pulsar's driver-metadata names) and
``OffloaderStatistics``. Must not know: managed ledgers, topics, stores.
"""

from __future__ import annotations

import uuid as uuid_mod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from magnetar.broker.bookkeeper.entry import LedgerEntry
from magnetar.broker.offload.errors import OffloadError


class LedgerSource(Protocol):
    """A ledger to offload, read like a ledger handle (a ``ReadHandle`` is one)."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def last_add_confirmed(self) -> int: ...

    @property
    def length(self) -> int: ...

    @property
    def is_closed(self) -> bool: ...

    async def read(self, first_entry_id: int, last_entry_id: int) -> Sequence[LedgerEntry]: ...


@dataclass(frozen=True, slots=True)
class OffloadedLedger:
    """One completed, verified offload of one ledger: record it, open it, delete it."""

    ledger_id: int
    attempt: uuid_mod.UUID
    driver: str
    driver_metadata: Mapping[str, str]
    data_key: str
    index_key: str
    last_entry_id: int
    ledger_length: int
    data_object_bytes: int
    index_object_bytes: int
    offloaded_at_ms: int
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def entry_count(self) -> int:
        return self.last_entry_id + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "ledgerId": self.ledger_id,
            "uid": str(self.attempt),
            "driverName": self.driver,
            "driverMetadata": dict(self.driver_metadata),
            "dataKey": self.data_key,
            "indexKey": self.index_key,
            "lastEntryId": self.last_entry_id,
            "length": self.ledger_length,
            "dataObjectBytes": self.data_object_bytes,
            "indexObjectBytes": self.index_object_bytes,
            "timestamp": self.offloaded_at_ms,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> OffloadedLedger:
        try:
            return cls(
                ledger_id=int(doc["ledgerId"]),
                attempt=uuid_mod.UUID(str(doc["uid"])),
                driver=str(doc["driverName"]),
                driver_metadata={str(k): str(v) for k, v in dict(doc["driverMetadata"]).items()},
                data_key=str(doc["dataKey"]),
                index_key=str(doc["indexKey"]),
                last_entry_id=int(doc["lastEntryId"]),
                ledger_length=int(doc["length"]),
                data_object_bytes=int(doc["dataObjectBytes"]),
                index_object_bytes=int(doc["indexObjectBytes"]),
                offloaded_at_ms=int(doc["timestamp"]),
                extra={str(k): str(v) for k, v in dict(doc.get("extra", {})).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise OffloadError(f"offloaded-ledger record does not parse: {exc}") from exc


@dataclass(frozen=True, slots=True)
class OffloaderStatistics:
    driver: str
    location: str
    offloads_started: int
    offloads_completed: int
    offloads_failed: int
    ledger_bytes_offloaded: int
    data_bytes_written: int
    opens: int
    index_cache_hits: int
    index_cache_misses: int
    index_cache_entries: int
    index_cache_bytes: int
    reads: int
    read_errors: int
    blocks_fetched: int
    block_bytes_fetched: int
    read_ahead_bytes: int
    read_retries: int
    corrupt_reads: int
    objects_deleted: int
    block_fetch_ms_total: float
    index_fetches: int
    index_fetch_ms_total: float
    offloads_in_worker: int = 0
    """Offloads the broker's offload worker process did (``managedLedgerOffloadWorker``)."""


__all__ = ["LedgerSource", "OffloadedLedger", "OffloaderStatistics"]

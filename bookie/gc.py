"""Garbage collection of deleted ledgers and compaction of sparse entry logs.

Owns: given the set of dead ledgers (decided by ``core.Bookie.collect_garbage`` from the live
set the service layer reads in metadata), dropping them from the index and the ledger table,
finding entry logs with no live data left (to delete) and logs whose live fraction is below
``compaction_threshold`` (to compact: live records are copied, rate-limited, to a new log;
the new log is fsynced; then the index is pointed at the copies in one atomic commit; only
then is the old log deleted).
Runs in a worker thread while the caller holds the bookie's maintenance lock, so no write-cache
flush runs concurrently: that is the flush barrier that keeps a stale location from
overwriting a newer one. A record is copied only if the index still points at it.
Must not know: metadata, asyncio, the journal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass

from magnetar.bookie.entry_log import LOG_HEADER_LEN, location
from magnetar.bookie.journal import ENTRY_HEADER
from magnetar.bookie.ledger_storage import LedgerStorage

log = logging.getLogger(__name__)

_COPY_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class GcResult:
    deleted_ledgers: tuple[int, ...]
    deleted_logs: tuple[int, ...]
    compacted_logs: tuple[int, ...]
    reclaimed_bytes: int
    written_bytes: int


@dataclass(frozen=True, slots=True)
class CollectOutcome:
    logs_to_delete: tuple[int, ...]
    compacted_logs: tuple[int, ...]
    written_bytes: int


class GarbageCollector:
    def __init__(
        self,
        storage: LedgerStorage,
        *,
        compaction_threshold: float = 0.5,
        rate_bytes_per_s: int = 64 * 1024 * 1024,
        max_time_s: float = 60.0,
    ) -> None:
        self.storage = storage
        self.compaction_threshold = compaction_threshold
        self.rate_bytes_per_s = rate_bytes_per_s
        self.max_time_s = max_time_s

    def collect(self, dead_ledgers: Collection[int]) -> CollectOutcome:
        index = self.storage.index
        assert index is not None
        logger = self.storage.entry_logger
        dead = set(dead_ledgers)
        batch = index.batch()
        for lid in dead:
            batch.delete_ledger(lid)
        to_delete: list[int] = []
        for log_id, m in list(logger.ledger_maps.items()):
            if dead and any(lid in m for lid in dead):
                for lid in dead:
                    m.pop(lid, None)
                batch.put_log_map(log_id, m)
            if not m and log_id != logger.current_log_id:
                batch.delete_log_map(log_id)
                to_delete.append(log_id)
        index.commit(batch, sync=True)
        for log_id in to_delete:
            logger.ledger_maps.pop(log_id, None)
        if dead:
            log.info(
                "gc: dropped %d ledgers; %d entry logs hold no live data", len(dead), len(to_delete)
            )

        compacted: list[int] = []
        written = 0
        if self.compaction_threshold > 0:
            started = time.monotonic()
            for log_id, m in sorted(logger.ledger_maps.items()):
                if log_id == logger.current_log_id or log_id in to_delete:
                    continue
                if time.monotonic() - started > self.max_time_s:
                    break
                try:
                    size = logger.log_size(log_id) - LOG_HEADER_LEN
                except OSError:
                    continue
                live = sum(m.values())
                if size <= 0 or live / size >= self.compaction_threshold:
                    continue
                written += self._compact(log_id, set(m))
                compacted.append(log_id)
                to_delete.append(log_id)
        return CollectOutcome(tuple(to_delete), tuple(compacted), written)

    def _compact(self, log_id: int, ledgers: set[int]) -> int:
        storage = self.storage
        index = storage.index
        assert index is not None
        logger = storage.entry_logger
        new_id = logger.allocate_log_id()
        out = logger.create_log(new_id)
        pos = LOG_HEADER_LEN
        current = {lid: index.ledger_locations(lid) for lid in ledgers}
        moved: dict[int, list[tuple[int, int]]] = {}
        new_map: dict[int, int] = {}
        chunks: list[bytes] = []
        pending = 0
        copied = 0
        count = 0
        t0 = time.monotonic()
        for rec in logger.scan(log_id):
            locs = current.get(rec.ledger_id)
            if locs is None or locs.get(rec.entry_id) != location(log_id, rec.offset):
                continue  # a dead ledger, or superseded by a newer copy elsewhere
            header = ENTRY_HEADER.pack(
                rec.ledger_id, rec.entry_id, rec.lac, rec.crc32c, len(rec.payload)
            )
            chunks.append(header)
            chunks.append(rec.payload)
            moved.setdefault(rec.ledger_id, []).append((rec.entry_id, location(new_id, pos)))
            n = rec.size
            new_map[rec.ledger_id] = new_map.get(rec.ledger_id, 0) + n
            pos += n
            pending += n
            copied += n
            count += 1
            if pending >= _COPY_CHUNK_BYTES:
                out.writev(chunks)
                chunks, pending = [], 0
                self._throttle(copied, t0)
        if chunks:
            out.writev(chunks)
        out.fdatasync()
        out.close()
        storage.fs.fsync_dir(storage.ledger_dir)
        batch = index.batch()
        for lid, pairs in moved.items():
            pairs.sort()
            batch.put_entries(lid, [e for e, _ in pairs], [loc for _, loc in pairs])
        if new_map:
            batch.put_log_map(new_id, new_map)
        batch.delete_log_map(log_id)
        index.commit(batch, sync=True)
        logger.ledger_maps.pop(log_id, None)
        if new_map:
            logger.ledger_maps[new_id] = new_map
        else:
            storage.fs.remove(logger.path(new_id))
        log.info(
            "gc: compacted entry log %x into %x (%d live bytes, %d entries)",
            log_id,
            new_id,
            copied,
            count,
        )
        return pos if new_map else 0  # the whole new file, header included

    def _throttle(self, copied: int, t0: float) -> None:
        if self.rate_bytes_per_s <= 0:
            return
        ahead = copied / self.rate_bytes_per_s - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)  # rate limiting in a worker thread, not synchronisation


__all__ = ["CollectOutcome", "GarbageCollector", "GcResult"]

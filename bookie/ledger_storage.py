"""Ledger storage: write cache + entry logs + index + read cache (DbLedgerStorage's shape).

Owns: the read path (write cache -> read cache -> index + entry log, with read-ahead), the
flush of a frozen write-cache half (sorted by (ledger, entry) into the entry log, fsync, then
one atomic index commit that also carries the ledger-table rows, the dirty entry-log maps and
the journal mark: the checkpoint's durable step).
Invariant: an index location is committed only after its record was written and its log
fsynced; the journal mark is committed (synced) in the last index batch of a flush, after every
location of that flush, so a mark never claims more than the index holds.
Threads: ``flush_half`` runs in a worker thread while the loop keeps reading (it only reads
the frozen half and appends to the current log; the loop never writes to a log).
Must not know: journals' format, fencing, master keys' meaning, asyncio.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from itertools import accumulate, chain

from magnetar.bookie.entry_log import LOG_HEADER_LEN, EntryLogger, location, split_location
from magnetar.bookie.files import FileSystem
from magnetar.bookie.index import BookieIndex, LedgerRecord
from magnetar.bookie.journal import ENTRY_HEADER, ENTRY_HEADER_LEN
from magnetar.bookie.read_cache import CachedEntry, ReadCache
from magnetar.bookie.write_cache import Half, WriteCache

log = logging.getLogger(__name__)

_WRITE_CHUNK_BYTES = 1024 * 1024
_YIELD_EVERY_ENTRIES = 1024
_YIELD_S = 0.00001
_INDEX_SLICE_KEYS = 256  # segments per index batch slice
_SYNC_EVERY_BYTES = 4 * 1024 * 1024
"""During a flush the entry log is fdatasync'd every this many bytes (BookKeeper's
``flushEntrylogBytes``): one fdatasync of a whole 64 MB half holds the file system's journal
commit, and with it every bookie-journal fdatasync (so every ack), for ~50 ms; 4 MB steps
bound that stall to a few ms."""


@dataclass(frozen=True, slots=True)
class FlushResult:
    entries: int
    bytes: int
    logs: tuple[int, ...]


class LedgerStorage:
    def __init__(
        self,
        fs: FileSystem,
        ledger_dir: str,
        index_dir: str,
        *,
        write_cache_half_bytes: int,
        read_cache_bytes: int,
        entry_log_size_max: int,
        readahead_entries: int = 100,
        readahead_bytes: int = 1024 * 1024,
    ) -> None:
        self.fs = fs
        self.ledger_dir = ledger_dir
        self.index_dir = index_dir
        self.write_cache = WriteCache(write_cache_half_bytes)
        self.read_cache = ReadCache(read_cache_bytes)
        self.entry_logger = EntryLogger(fs, ledger_dir, log_size_max=entry_log_size_max)
        self.index: BookieIndex | None = None
        self.readahead_entries = readahead_entries
        self.readahead_bytes = readahead_bytes
        self.flushed_entries = 0

    def open(self) -> None:
        self.fs.makedirs(self.index_dir)
        self.index = BookieIndex(self.index_dir)
        self.entry_logger.ledger_maps = self.index.log_maps()
        self.entry_logger.open()

    def close(self) -> None:
        self.entry_logger.close()
        if self.index is not None:
            self.index.close()
            self.index = None

    # -- read path (loop thread) --

    def get_entry(self, ledger_id: int, entry_id: int) -> CachedEntry | None:
        """(lac, crc32c, payload) or None; raises ``CorruptEntry`` on a checksum mismatch."""
        hit = self.write_cache.get(ledger_id, entry_id)
        if hit is not None:
            header, payload = hit
            _, _, lac, crc, _ = ENTRY_HEADER.unpack(header)
            return lac, crc, payload if isinstance(payload, bytes) else bytes(payload)
        cached = self.read_cache.get(ledger_id, entry_id)
        if cached is not None:
            return cached
        assert self.index is not None
        for _attempt in range(2):
            loc = self.index.get_location(ledger_id, entry_id)
            if loc is None:
                return None
            log_id, offset = split_location(loc)
            try:
                stored = self.entry_logger.read(log_id, offset, ledger_id, entry_id)
            except FileNotFoundError:
                self.index.invalidate_cache()
                continue  # compaction moved it between the lookup and the read: look again
            self._read_ahead(log_id, offset + stored.size, ledger_id)
            return stored.lac, stored.crc32c, stored.payload
        return None

    def _read_ahead(self, log_id: int, offset: int, ledger_id: int) -> None:
        if self.readahead_entries <= 0:
            return
        for e in self.entry_logger.read_following(
            log_id, offset, ledger_id, self.readahead_entries, self.readahead_bytes
        ):
            self.read_cache.put(ledger_id, e.entry_id, e.lac, e.crc32c, e.payload)

    def last_entry_id(self, ledger_id: int) -> int:
        last = self.write_cache.last_entry_id(ledger_id)
        assert self.index is not None
        found = self.index.last_entry(ledger_id)
        if found is not None and found[0] > last:
            last = found[0]
        return last

    # -- flush (worker thread) --

    def flush_half(
        self, half: Half, ledgers: list[LedgerRecord], mark: bytes | None
    ) -> FlushResult:
        """Write a frozen half sorted by (ledger, entry), fsync, commit index + ledgers + mark."""
        index = self.index
        assert index is not None
        logger = self.entry_logger
        batch = index.batch()
        batches = [batch]  # committed in slices so no single RocksDB write holds the GIL long
        limit = logger.log_size_max
        chunks: list[bytes | memoryview] = []
        pending = 0
        unsynced = 0
        entries = 0
        total = 0
        logger.ensure_room(0)
        log_id = logger.current_log_id
        logs = [log_id]
        pos = logger.position
        ledger_bytes: dict[int, int] = {}
        budget = _YIELD_EVERY_ENTRIES
        for ledger_id in sorted(half):
            d = half[ledger_id]
            if not d:
                continue
            lbytes = 0
            eids: list[int] = []
            locs: list[int] = []
            add_eid = eids.append
            add_loc = locs.append
            ids = sorted(d)
            # Fast path, a slice (~1 MB) at a time, while the log has room: positions by
            # ``accumulate``, chunks by ``chain`` (no Python step per entry but the size).
            first_size = ENTRY_HEADER_LEN + len(d[ids[0]][1])
            step = max(16, min(_YIELD_EVERY_ENTRIES, _WRITE_CHUNK_BYTES // first_size))
            start = 0
            while start < len(ids):
                part = ids[start : start + step]
                values = list(map(d.__getitem__, part))
                sizes = [ENTRY_HEADER_LEN + len(v[1]) for v in values]
                nbytes = sum(sizes)
                if pos + nbytes > limit and pos > LOG_HEADER_LEN:
                    break  # the log rolls inside this slice: the rest goes entry by entry
                eids.extend(part)
                locs.extend(accumulate(sizes[:-1], initial=(log_id << 32) | pos))
                chunks.extend(chain.from_iterable(values))
                pos += nbytes
                pending += nbytes
                lbytes += nbytes
                start += len(part)
                if pending >= _WRITE_CHUNK_BYTES:
                    logger.write(chunks, pending)
                    chunks = []
                    unsynced += pending
                    pending = 0
                    if unsynced >= _SYNC_EVERY_BYTES:
                        logger.sync()
                        unsynced = 0
                time.sleep(_YIELD_S)  # hand the GIL to the event loop between slices
            for entry_id in ids[start:]:
                header, payload = d[entry_id]
                n = ENTRY_HEADER_LEN + len(payload)
                if pos + n > limit and pos > LOG_HEADER_LEN:
                    if chunks:
                        logger.write(chunks, pending)
                        chunks = []
                        pending = 0
                    if lbytes:
                        ledger_bytes[ledger_id] = ledger_bytes.get(ledger_id, 0) + lbytes
                        lbytes = 0
                    logger.account(log_id, ledger_bytes)
                    ledger_bytes = {}
                    logger.ensure_room(n)  # rolls: syncs and closes the full log
                    log_id = logger.current_log_id
                    logs.append(log_id)
                    pos = logger.position
                chunks.append(header)
                chunks.append(payload)
                add_eid(entry_id)
                add_loc((log_id << 32) | pos)
                pos += n
                pending += n
                lbytes += n
                if pending >= _WRITE_CHUNK_BYTES:
                    logger.write(chunks, pending)
                    chunks = []
                    unsynced += pending
                    pending = 0
                    if unsynced >= _SYNC_EVERY_BYTES:
                        logger.sync()
                        unsynced = 0
                budget -= 1
                if not budget:
                    budget = _YIELD_EVERY_ENTRIES
                    # Hand the GIL to the event loop (adds keep flowing during a flush)
                    # instead of holding it for a whole switch interval (5 ms).
                    time.sleep(_YIELD_S)
            batch.put_entries(ledger_id, eids, locs)
            entries += len(d)
            total += lbytes
            if batch.count >= _INDEX_SLICE_KEYS:
                batch = index.batch()
                batches.append(batch)
            if lbytes:
                ledger_bytes[ledger_id] = ledger_bytes.get(ledger_id, 0) + lbytes
        if chunks:
            logger.write(chunks, pending)
        logger.sync()
        if ledger_bytes:
            logger.account(log_id, ledger_bytes)
        for dirty in list(logger.dirty_maps):
            m = logger.ledger_maps.get(dirty)
            if m is not None:
                batch.put_log_map(dirty, m)
        for record in ledgers:
            batch.put_ledger(record)
        if mark is not None:
            batch.put_mark(mark)
        # Earlier slices unsynced, the last (with ledger rows, log maps and the mark) synced:
        # the WAL is sequential, so the final sync covers them. A crash between slices leaves
        # locations of synced log records without the mark: replay re-adds those entries.
        for earlier in batches[:-1]:
            index.commit(earlier, sync=False)
            time.sleep(_YIELD_S)
        index.commit(batch, sync=True)
        logger.dirty_maps.clear()
        self.flushed_entries += entries
        return FlushResult(entries, total, tuple(logs))


__all__ = ["FlushResult", "LedgerStorage", "location"]

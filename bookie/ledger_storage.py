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
from magnetar.bookie.write_cache import CachedValue, Half, WriteCache

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

    def read_packed(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int
    ) -> tuple[list[bytes | memoryview], int]:
        """(parts, count): entries ``first_entry_id`` .. at most ``last_entry_id`` in the
        packed read layout (header, payload), stopping at a gap or past about ``max_bytes`` of
        payload (at least the first entry if it exists). Entries still in the write cache go
        out as cached (the header is the record's); entries in an entry log go out as runs of
        records read in one ``pread`` each (``EntryLogger.read_run``), never one by one; the
        read cache is neither consulted for those runs nor filled by them (a scan must not
        evict what tailing readers use)."""
        parts: list[bytes | memoryview] = []
        add = parts.append
        wc_get = self.write_cache.get
        index = self.index
        assert index is not None
        entry_id = first_entry_id
        size = 0
        while entry_id <= last_entry_id and (not parts or size < max_bytes):
            hit = wc_get(ledger_id, entry_id)
            if hit is not None:
                header, payload = hit
                if parts and size + len(payload) > max_bytes:
                    break
                add(header)
                add(payload)
                size += len(payload)
                entry_id += 1
                continue
            run = self._log_run(
                ledger_id, entry_id, last_entry_id, max_bytes - size if parts else max_bytes
            )
            if run is None:
                break
            records, count, nbytes = run
            add(records)
            size += nbytes
            entry_id += count
        return parts, entry_id - first_entry_id

    def _log_run(
        self, ledger_id: int, entry_id: int, last_entry_id: int, max_bytes: int
    ) -> tuple[bytes | memoryview, int, int] | None:
        """A run of records from ``entry_id`` in its entry log (None: not stored here)."""
        assert self.index is not None
        for _attempt in range(2):
            loc = self.index.get_location(ledger_id, entry_id)
            if loc is None:
                return None
            log_id, offset = split_location(loc)
            try:
                return self.entry_logger.read_run(
                    log_id, offset, ledger_id, entry_id, last_entry_id, max(1, max_bytes)
                )
            except FileNotFoundError:
                self.index.invalidate_cache()  # compaction moved it: look again
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
        out = _LogAppender(self.entry_logger)
        batch = index.batch()
        batches = [batch]  # committed in slices so no single RocksDB write holds the GIL long
        entries = 0
        budget = _YIELD_EVERY_ENTRIES
        for ledger_id in sorted(half):
            d = half[ledger_id]
            if not d:
                continue
            eids: list[int] = []
            locs: list[int] = []
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
                if not out.append_slice(ledger_id, values, sizes, locs):
                    break  # the log rolls inside this slice: the rest goes entry by entry
                eids.extend(part)
                start += len(part)
                time.sleep(_YIELD_S)  # hand the GIL to the event loop between slices
            add_eid = eids.append
            add_loc = locs.append
            for entry_id in ids[start:]:
                add_eid(entry_id)
                add_loc(out.append(ledger_id, d[entry_id]))
                budget -= 1
                if not budget:
                    budget = _YIELD_EVERY_ENTRIES
                    # Hand the GIL to the event loop (adds keep flowing during a flush)
                    # instead of holding it for a whole switch interval (5 ms).
                    time.sleep(_YIELD_S)
            batch.put_entries(ledger_id, eids, locs)
            entries += len(d)
            if batch.count >= _INDEX_SLICE_KEYS:
                batch = index.batch()
                batches.append(batch)
        out.finish()
        logger = self.entry_logger
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
        return FlushResult(entries, out.total, tuple(out.logs))


class _LogAppender:
    """The bookkeeping of one flush's appends to the entry logs (worker thread).

    Buffers records into ~1 MB writes, fdatasyncs every ``_SYNC_EVERY_BYTES``, rolls to a new
    log when a record does not fit, and accounts each ledger's bytes to the log that holds
    them. ``finish`` writes the rest and syncs: only then may index locations be committed.
    """

    __slots__ = (
        "_chunks",
        "_ledger_bytes",
        "_logger",
        "_pending",
        "_unsynced",
        "log_id",
        "logs",
        "pos",
        "total",
    )

    def __init__(self, logger: EntryLogger) -> None:
        self._logger = logger
        self._chunks: list[bytes | memoryview] = []
        self._pending = 0
        self._unsynced = 0
        self._ledger_bytes: dict[int, int] = {}
        logger.ensure_room(0)
        self.log_id = logger.current_log_id
        self.logs = [self.log_id]
        self.pos = logger.position
        self.total = 0

    def _fits(self, nbytes: int) -> bool:
        return self.pos + nbytes <= self._logger.log_size_max or self.pos <= LOG_HEADER_LEN

    def _advance(self, ledger_id: int, nbytes: int) -> None:
        self.pos += nbytes
        self._pending += nbytes
        self.total += nbytes
        self._ledger_bytes[ledger_id] = self._ledger_bytes.get(ledger_id, 0) + nbytes
        if self._pending >= _WRITE_CHUNK_BYTES:
            self._write()
            if self._unsynced >= _SYNC_EVERY_BYTES:
                self._logger.sync()
                self._unsynced = 0

    def _write(self) -> None:
        if self._chunks:
            self._logger.write(self._chunks, self._pending)
            self._chunks = []
        self._unsynced += self._pending
        self._pending = 0

    def append_slice(
        self,
        ledger_id: int,
        values: list[CachedValue],
        sizes: list[int],
        locs: list[int],
    ) -> bool:
        """Append a slice of records whole and their locations to ``locs``; False (nothing
        appended) when the slice does not fit in the current log."""
        nbytes = sum(sizes)
        if not self._fits(nbytes):
            return False
        locs.extend(accumulate(sizes[:-1], initial=(self.log_id << 32) | self.pos))
        self._chunks.extend(chain.from_iterable(values))
        self._advance(ledger_id, nbytes)
        return True

    def append(self, ledger_id: int, record: CachedValue) -> int:
        """Append one record, rolling the log first if it does not fit; its location."""
        header, payload = record
        n = ENTRY_HEADER_LEN + len(payload)
        if not self._fits(n):
            self._roll(n)
        loc = (self.log_id << 32) | self.pos
        self._chunks.append(header)
        self._chunks.append(payload)
        self._advance(ledger_id, n)
        return loc

    def _roll(self, n: int) -> None:
        self._write()
        self._logger.account(self.log_id, self._ledger_bytes)
        self._ledger_bytes = {}
        self._logger.ensure_room(n)  # rolls: syncs and closes the full log
        self._unsynced = 0
        self.log_id = self._logger.current_log_id
        self.logs.append(self.log_id)
        self.pos = self._logger.position

    def finish(self) -> None:
        self._write()
        self._logger.sync()
        if self._ledger_bytes:
            self._logger.account(self.log_id, self._ledger_bytes)


__all__ = ["FlushResult", "LedgerStorage", "location"]

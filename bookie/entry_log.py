"""Entry logs: interleaved, append-only files holding the entries of many ledgers.

Owns: the entry-log file format, appending (by the checkpoint's flush, in a worker thread),
rollover at ``log_size_max``, positional reads (single entry, read-ahead run, full scan for
compaction), deletion, and the per-log ledger map (ledger id -> bytes in that log) used by GC.

File ``<ledger dir>/<016x log id>.log``::

    header : magic b"MGEL" | u32 version (1) | u64 log id      (16 bytes, big-endian)
    record*: entry header (32 B: ledger u64, entry u64, lac i64, crc32c u32, length u32) | payload

A location is (log id, offset of the record's header), packed as ``log_id << 32 | offset``.
Invariants: a record is referenced by the index only after it was written and the log was
fsynced; readers verify the header's (ledger, entry) and the payload's crc32c (a mismatch is
``CorruptEntry``, never served), except ``read_run``: a packed read's records go out as they
lie, their (ledger, entry) checked, their checksums left to the reader, who verifies each
(``wire.run_spans``; BookKeeper's bookies leave digests to their clients too). A new log is
started on every open, so bytes left after a crash in an older log are never appended to.
Must not know: the index, the write cache.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c as _crc32c

from magnetar.bookie.errors import CorruptEntry
from magnetar.bookie.files import AppendFile, FileSystem, ReadFile
from magnetar.bookie.journal import ENTRY_HEADER, ENTRY_HEADER_LEN
from magnetar.bookie.records import uniform_records

log = logging.getLogger(__name__)

LOG_MAGIC = b"MGEL"
LOG_VERSION = 1
LOG_HEADER = struct.Struct(">4sIQ")
LOG_HEADER_LEN = LOG_HEADER.size
OFFSET_BITS = 32
OFFSET_MASK = (1 << OFFSET_BITS) - 1
_crc = _crc32c.crc32c


def location(log_id: int, offset: int) -> int:
    return (log_id << OFFSET_BITS) | offset


def split_location(loc: int) -> tuple[int, int]:
    return loc >> OFFSET_BITS, loc & OFFSET_MASK


def log_file_name(log_id: int) -> str:
    return f"{log_id:016x}.log"


@dataclass(frozen=True, slots=True)
class EntryLogRecord:
    """One record read from an entry log."""

    ledger_id: int
    entry_id: int
    lac: int
    crc32c: int
    payload: bytes
    offset: int

    @property
    def size(self) -> int:
        return ENTRY_HEADER_LEN + len(self.payload)


class EntryLogger:
    """Appends to the current log (one writer thread at a time) and reads any log."""

    def __init__(
        self, fs: FileSystem, directory: str, *, log_size_max: int = 512 * 1024 * 1024
    ) -> None:
        assert log_size_max <= OFFSET_MASK
        self._fs = fs
        self._dir = directory
        self.log_size_max = log_size_max
        self._lock = threading.Lock()
        self._next_log_id = 1
        self._current: AppendFile | None = None
        self.current_log_id = 0
        self.position = 0
        self._readers: dict[int, ReadFile] = {}
        self.ledger_maps: dict[int, dict[int, int]] = {}
        """log id -> {ledger id -> bytes}: what each log holds (kept by the writers)."""
        self.dirty_maps: set[int] = set()
        self._needs_roll = False

    def __repr__(self) -> str:
        return f"<EntryLogger {self._dir} current={self.current_log_id:x}@{self.position}>"

    # -- lifecycle --

    def open(self) -> None:
        self._fs.makedirs(self._dir)
        ids = self.log_ids()
        self._next_log_id = (ids[-1] + 1) if ids else 1
        self._roll()

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
            self._current = None
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def log_ids(self) -> list[int]:
        out = []
        for name in self._fs.listdir(self._dir):
            if name.endswith(".log") and len(name) == 20:
                try:
                    out.append(int(name[:16], 16))
                except ValueError:
                    continue
        return sorted(out)

    def path(self, log_id: int) -> str:
        return f"{self._dir}/{log_file_name(log_id)}"

    def allocate_log_id(self) -> int:
        with self._lock:
            log_id = self._next_log_id
            self._next_log_id += 1
            return log_id

    def create_log(self, log_id: int) -> AppendFile:
        """A new, empty log file with its header written (not yet synced)."""
        f = self._fs.open_append(self.path(log_id))
        f.write(LOG_HEADER.pack(LOG_MAGIC, LOG_VERSION, log_id))
        return f

    def _roll(self) -> None:
        if self._current is not None:
            self._current.fdatasync()
            self._current.close()
            self._current = None
        log_id = self.allocate_log_id()
        self._current = self.create_log(log_id)
        self._fs.fsync_dir(self._dir)
        self.current_log_id = log_id
        self.position = LOG_HEADER_LEN
        self._needs_roll = False

    # -- writing (the flush thread) --

    def ensure_room(self, nbytes: int) -> None:
        """Roll to a new log if ``nbytes`` more would pass the size limit (or after an error)."""
        if self._needs_roll or (
            self.position + nbytes > self.log_size_max and self.position > LOG_HEADER_LEN
        ):
            self._roll()

    def write(self, chunks: Sequence[bytes | memoryview], nbytes: int) -> None:
        assert self._current is not None
        try:
            self._current.writev(chunks)
        except OSError:
            self._needs_roll = True  # the file's tail is unknown now: never append to it again
            raise
        self.position += nbytes
        # Writeback of each chunk starts now rather than at the next sync: the disk takes
        # the log's megabytes a chunk at a time, and a journal fdatasync waits behind one
        # chunk, not behind a sync of several (p90 of a 264 KB journal sync during a flush:
        # 4-5 ms -> 1.2 ms in a microbenchmark on this machine's disk).
        self._current.start_writeback()

    def sync(self) -> None:
        assert self._current is not None
        try:
            self._current.fdatasync()
        except OSError:
            self._needs_roll = True
            raise

    def account(self, log_id: int, ledger_bytes: dict[int, int]) -> None:
        m = self.ledger_maps.setdefault(log_id, {})
        for ledger_id, nbytes in ledger_bytes.items():
            m[ledger_id] = m.get(ledger_id, 0) + nbytes
        self.dirty_maps.add(log_id)

    # -- reading (any thread) --

    def _reader(self, log_id: int) -> ReadFile:
        reader = self._readers.get(log_id)
        if reader is None:
            reader = self._readers[log_id] = self._fs.open_read(self.path(log_id))
        return reader

    def read(self, log_id: int, offset: int, ledger_id: int, entry_id: int) -> EntryLogRecord:
        reader = self._reader(log_id)
        data = reader.pread(ENTRY_HEADER_LEN + 4096, offset)
        if len(data) < ENTRY_HEADER_LEN:
            raise CorruptEntry(f"entry log {log_id:x} offset {offset}: short header")
        lid, eid, lac, crc, length = ENTRY_HEADER.unpack_from(data, 0)
        if lid != ledger_id or eid != entry_id:
            raise CorruptEntry(
                f"entry log {log_id:x} offset {offset}: holds ({lid},{eid}), "
                f"index said ({ledger_id},{entry_id})"
            )
        end = ENTRY_HEADER_LEN + length
        if len(data) >= end:
            payload = data[ENTRY_HEADER_LEN:end]
        else:
            rest = reader.pread(end - len(data), offset + len(data))
            payload = data[ENTRY_HEADER_LEN:] + rest
        if len(payload) != length or _crc(payload) != crc:
            raise CorruptEntry(f"entry log {log_id:x} offset {offset}: checksum mismatch")
        return EntryLogRecord(lid, eid, lac, crc, payload, offset)

    def read_following(
        self, log_id: int, offset: int, ledger_id: int, max_entries: int, max_bytes: int
    ) -> list[EntryLogRecord]:
        """Read-ahead: records after ``offset`` while they belong to ``ledger_id``."""
        out: list[EntryLogRecord] = []
        reader = self._reader(log_id)
        block = reader.pread(max_bytes, offset)
        pos = 0
        while len(out) < max_entries and pos + ENTRY_HEADER_LEN <= len(block):
            lid, eid, lac, crc, length = ENTRY_HEADER.unpack_from(block, pos)
            end = pos + ENTRY_HEADER_LEN + length
            if lid != ledger_id or end > len(block):
                break
            payload = block[pos + ENTRY_HEADER_LEN : end]
            if _crc(payload) != crc:
                break  # the direct read of that entry will report it
            out.append(EntryLogRecord(lid, eid, lac, crc, payload, offset + pos))
            pos = end
        return out

    def read_run(  # noqa: PLR0917 (a run's bounds)
        self,
        log_id: int,
        offset: int,
        ledger_id: int,
        first_entry_id: int,
        last_entry_id: int,
        max_bytes: int,
    ) -> tuple[bytes | memoryview, int, int]:
        """(records, count, payload bytes): the records from ``offset`` while they are
        ``ledger_id``'s entries ``first_entry_id``, ``first_entry_id + 1``, ... up to
        ``last_entry_id``, within about ``max_bytes`` of payload (at least the first), as they
        lie in the log (the packed read layout: header, payload). The first record must be
        the one asked (``CorruptEntry`` otherwise: the index and the log disagree)."""
        reader = self._reader(log_id)
        block = reader.pread(ENTRY_HEADER_LEN + max(max_bytes, 4096), offset)
        if len(block) < ENTRY_HEADER_LEN:
            raise CorruptEntry(f"entry log {log_id:x} offset {offset}: short header")
        lid, eid, _lac, _crc_value, length = ENTRY_HEADER.unpack_from(block, 0)
        if lid != ledger_id or eid != first_entry_id:
            raise CorruptEntry(
                f"entry log {log_id:x} offset {offset}: holds ({lid},{eid}), "
                f"index said ({ledger_id},{first_entry_id})"
            )
        end = ENTRY_HEADER_LEN + length
        if end > len(block):  # one entry larger than the block: read it whole
            block = reader.pread(end, offset)
            if len(block) < end:
                raise CorruptEntry(f"entry log {log_id:x} offset {offset}: short record")
            return block, 1, length
        unpack = ENTRY_HEADER.unpack_from
        n = len(block)
        pos = end
        count = 1
        size = length
        expect = first_entry_id + 1
        # records of one length are found in bulk; the walk below goes on from where they stop
        uniform, _, _ = uniform_records(
            block, 0, ledger_id, first_entry_id, min(last_entry_id - first_entry_id + 1, n)
        )
        if uniform > 1:
            count = min(uniform, max(1, max_bytes // length) if length else uniform)
            pos = count * end
            size = count * length
            expect = first_entry_id + count
        while expect <= last_entry_id and pos + ENTRY_HEADER_LEN <= n:
            lid, eid, _lac, _crc_value, length = unpack(block, pos)
            stop = pos + ENTRY_HEADER_LEN + length
            if lid != ledger_id or eid != expect or stop > n or size + length > max_bytes:
                break
            pos = stop
            size += length
            count += 1
            expect += 1
        return memoryview(block)[:pos], count, size

    def scan(self, log_id: int) -> Iterator[EntryLogRecord]:
        """Every intact record of a log, in file order (compaction); stops at a bad record."""
        data = self._fs.read_all(self.path(log_id))
        if len(data) < LOG_HEADER_LEN or data[:4] != LOG_MAGIC:
            log.warning("entry log %x: bad header, not scanned", log_id)
            return
        pos = LOG_HEADER_LEN
        while pos + ENTRY_HEADER_LEN <= len(data):
            lid, eid, lac, crc, length = ENTRY_HEADER.unpack_from(data, pos)
            end = pos + ENTRY_HEADER_LEN + length
            if end > len(data):
                break
            payload = data[pos + ENTRY_HEADER_LEN : end]
            if _crc(payload) != crc:
                log.warning("entry log %x: bad record at %d, rest not scanned", log_id, pos)
                break
            yield EntryLogRecord(lid, eid, lac, crc, payload, pos)
            pos = end

    def log_size(self, log_id: int) -> int:
        return self._fs.file_size(self.path(log_id))

    def delete(self, log_id: int) -> int:
        """Delete a log that holds no live data; returns the bytes reclaimed."""
        assert log_id != self.current_log_id, "never delete the log being written"
        reader = self._readers.pop(log_id, None)
        if reader is not None:
            reader.close()
        path = self.path(log_id)
        size = self._fs.file_size(path)
        self._fs.remove(path)
        self.ledger_maps.pop(log_id, None)
        self.dirty_maps.discard(log_id)
        return size


__all__ = [
    "LOG_HEADER_LEN",
    "EntryLogRecord",
    "EntryLogger",
    "location",
    "log_file_name",
    "split_location",
]

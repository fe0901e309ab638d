"""The bookie's index: entry locations, the ledger table, entry-log maps and the journal mark.

The ONLY bookie module that imports rocksdict (import-linter checks it); RocksDB errors are
translated to ``BookieIOError`` here.

One RocksDB instance, four column families, all written through one ``IndexBatch`` so a
checkpoint commits atomically (``sync=True``):
- ``default`` (locations), in *segments*: key = ledger id (u64 BE) | first entry id (u64 BE),
  16 bytes, so a ledger's segments are contiguous and sorted; value = the locations of entries
  first, first+1, ... as u64 (``log_id << 32 | offset``, little-endian array), 0 = no entry
  (striping gaps). One RocksDB key per ledger run per flush instead of one per entry (the
  per-entry put was ~1 us of Python per add). Invariants: a ledger's segments are disjoint;
  a segment's first and last locations are non-zero; at most ``SEGMENT_ENTRIES_MAX`` long.
  "Last entry of a ledger" is one ``seek_for_prev((ledger, 2**64-1))``; a lookup is one
  ``seek_for_prev((ledger, entry))``. Writing entries that overlap existing segments merges
  them (newer location wins): replay and recovery adds rewrite entries.
- ``ledgers``: key = ledger id (u64 BE); value = u8 flags (1 fenced) | i64 explicit LAC |
  master key bytes.
- ``logs``: key = log id (u64 BE); value = repeated (ledger u64, bytes u64): the log's map.
- ``meta``: ``b"mark"`` -> the 16-byte journal mark of the last checkpoint.
Must not know: asyncio, files other than its own directory, the journal format.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

from rocksdict import (
    AccessType,
    DBCompressionType,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from magnetar.bookie.errors import BookieIOError

KEY = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")
_LEDGER_VALUE = struct.Struct(">Bq")
_MAP_ITEM = struct.Struct(">QQ")
ENTRY_ID_MAX = (1 << 64) - 1
SEGMENT_ENTRIES_MAX = 4096
SEGMENT_GAP_MAX = 64  # a larger hole between entries starts a new segment
FLAG_FENCED = 1
_CFS = ("ledgers", "logs", "meta")
_MARK_KEY = b"mark"
pack_key = KEY.pack


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    ledger_id: int
    master_key: bytes
    fenced: bool
    explicit_lac: int

    def pack(self) -> bytes:
        flags = FLAG_FENCED if self.fenced else 0
        return _LEDGER_VALUE.pack(flags, self.explicit_lac) + self.master_key

    @classmethod
    def unpack(cls, ledger_id: int, value: bytes) -> LedgerRecord:
        flags, lac = _LEDGER_VALUE.unpack_from(value, 0)
        return cls(ledger_id, bytes(value[_LEDGER_VALUE.size :]), bool(flags & FLAG_FENCED), lac)


def _options() -> Options:
    opt = Options(raw_mode=True)
    opt.create_if_missing(True)
    opt.create_missing_column_families(True)
    opt.set_compression_type(DBCompressionType.lz4())
    return opt


class IndexBatch:
    """Index updates applied atomically by ``BookieIndex.commit``."""

    __slots__ = ("_index", "count", "wb")

    def __init__(self, index: BookieIndex) -> None:
        self._index = index
        self.wb = WriteBatch(raw_mode=True)
        self.count = 0

    def put_entries(self, ledger_id: int, entry_ids: list[int], locations: list[int]) -> None:
        """Locations of a ledger's entries (``entry_ids`` sorted ascending, no duplicates),
        merged with the segments already committed (one call per ledger per batch)."""
        if not entry_ids:
            return
        first, last = entry_ids[0], entry_ids[-1]
        old = self._index.overlapping_segments(ledger_id, first, last)
        if not old and last - first + 1 == len(entry_ids):
            self._emit_contiguous(ledger_id, first, locations)
            return
        merged: dict[int, int] = {}
        for seg_first, arr in old:
            self.wb.delete(pack_key(ledger_id, seg_first))
            for i, loc in enumerate(arr):
                if loc:
                    merged[seg_first + i] = loc
        merged.update(zip(entry_ids, locations, strict=True))
        ids = sorted(merged) if old else entry_ids
        start = 0
        for i in range(1, len(ids) + 1):
            if (
                i == len(ids)
                or ids[i] - ids[i - 1] > SEGMENT_GAP_MAX
                or ids[i] - ids[start] >= SEGMENT_ENTRIES_MAX
            ):
                seg_first = ids[start]
                arr = array("Q", bytes(8 * (ids[i - 1] - seg_first + 1)))
                for e in ids[start:i]:
                    arr[e - seg_first] = merged[e]
                self.wb.put(pack_key(ledger_id, seg_first), arr.tobytes())
                self.count += 1
                start = i

    def _emit_contiguous(self, ledger_id: int, first: int, locations: list[int]) -> None:
        for start in range(0, len(locations), SEGMENT_ENTRIES_MAX):
            chunk = array("Q", locations[start : start + SEGMENT_ENTRIES_MAX])
            self.wb.put(pack_key(ledger_id, first + start), chunk.tobytes())
            self.count += 1

    def put_ledger(self, record: LedgerRecord) -> None:
        self.wb.put(_U64.pack(record.ledger_id), record.pack(), self._index.cf_ledgers)
        self.count += 1

    def delete_ledger(self, ledger_id: int) -> None:
        """Drop a ledger's locations and its table row."""
        self.wb.delete_range(pack_key(ledger_id, 0), pack_key(ledger_id + 1, 0))
        self.wb.delete(_U64.pack(ledger_id), self._index.cf_ledgers)
        self.count += 1

    def put_log_map(self, log_id: int, ledger_bytes: dict[int, int]) -> None:
        value = b"".join(_MAP_ITEM.pack(lid, n) for lid, n in sorted(ledger_bytes.items()))
        self.wb.put(_U64.pack(log_id), value, self._index.cf_logs)
        self.count += 1

    def delete_log_map(self, log_id: int) -> None:
        self.wb.delete(_U64.pack(log_id), self._index.cf_logs)
        self.count += 1

    def put_mark(self, mark: bytes) -> None:
        self.wb.put(_MARK_KEY, mark, self._index.cf_meta)
        self.count += 1


class BookieIndex:
    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._db = Rdict(
                path,
                options=_options(),
                column_families={name: _options() for name in _CFS},
                access_type=AccessType.read_write(),
            )
            self.cf_ledgers = self._db.get_column_family_handle("ledgers")
            self.cf_logs = self._db.get_column_family_handle("logs")
            self.cf_meta = self._db.get_column_family_handle("meta")
            self._ledgers = self._db.get_column_family("ledgers")
            self._logs = self._db.get_column_family("logs")
            self._meta = self._db.get_column_family("meta")
        except Exception as exc:  # rocksdict raises plain Exception subclasses
            raise BookieIOError(f"cannot open index {path}: {exc}") from exc
        self._sync = WriteOptions()
        self._sync.sync = True
        self._last_segment: tuple[int, int, array[int]] | None = None
        self._version = 0
        """The segment of the last lookup (sequential reads skip the seek); dropped on commit."""

    def close(self) -> None:
        for cf in (self._ledgers, self._logs, self._meta):
            cf.close()
        self._db.close()
        del self._ledgers, self._logs, self._meta, self.cf_ledgers, self.cf_logs, self.cf_meta
        del self._db

    # -- writes --

    def batch(self) -> IndexBatch:
        return IndexBatch(self)

    def commit(self, batch: IndexBatch, *, sync: bool = True) -> None:
        self._version += 1
        try:
            if sync:
                self._db.write(batch.wb, self._sync)
            else:
                self._db.write(batch.wb)
        except Exception as exc:
            raise BookieIOError(f"index commit failed: {exc}") from exc
        finally:
            self._version += 1
            self._last_segment = None

    # -- locations --

    def _segment_at_or_before(self, ledger_id: int, entry_id: int) -> tuple[int, array[int]] | None:
        it = self._db.iter()
        try:
            it.seek_for_prev(pack_key(ledger_id, entry_id))
            if not it.valid():
                return None
            key = it.key()
            assert isinstance(key, bytes)
            lid, first = KEY.unpack(key)
            if lid != ledger_id:
                return None
            arr = array("Q")
            value = it.value()
            assert isinstance(value, bytes)
            arr.frombytes(value)
            return first, arr
        finally:
            del it

    def get_location(self, ledger_id: int, entry_id: int) -> int | None:
        cached = self._last_segment
        if cached is not None and cached[0] == ledger_id:
            first, arr = cached[1], cached[2]
            if first <= entry_id < first + len(arr):
                return arr[entry_id - first] or None
        version = self._version
        found = self._segment_at_or_before(ledger_id, entry_id)
        if found is None:
            return None
        first, arr = found
        if self._version == version:  # no commit ran meanwhile (flushes commit in a thread)
            self._last_segment = (ledger_id, first, arr)
        idx = entry_id - first
        if idx >= len(arr):
            return None
        return arr[idx] or None

    def invalidate_cache(self) -> None:
        self._version += 1
        self._last_segment = None

    def last_entry(self, ledger_id: int) -> tuple[int, int] | None:
        """(entry id, location) of the ledger's highest entry, or None."""
        found = self._segment_at_or_before(ledger_id, ENTRY_ID_MAX)
        if found is None:
            return None
        first, arr = found
        return first + len(arr) - 1, arr[-1]

    def overlapping_segments(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int
    ) -> list[tuple[int, array[int]]]:
        """Committed segments of the ledger that overlap first..last (newest key first)."""
        out: list[tuple[int, array[int]]] = []
        it = self._db.iter()
        try:
            it.seek_for_prev(pack_key(ledger_id, last_entry_id))
            while it.valid():
                key = it.key()
                value = it.value()
                assert isinstance(key, bytes) and isinstance(value, bytes)
                lid, first = KEY.unpack(key)
                if lid != ledger_id or first + len(value) // 8 - 1 < first_entry_id:
                    break
                arr = array("Q")
                arr.frombytes(value)
                out.append((first, arr))
                it.prev()
        finally:
            del it
        return out

    def ledger_locations(self, ledger_id: int) -> dict[int, int]:
        """Every (entry id -> location) of a ledger (GC compaction)."""
        out: dict[int, int] = {}
        it = self._db.iter()
        try:
            it.seek(pack_key(ledger_id, 0))
            while it.valid():
                key = it.key()
                value = it.value()
                assert isinstance(key, bytes) and isinstance(value, bytes)
                lid, first = KEY.unpack(key)
                if lid != ledger_id:
                    break
                arr = array("Q")
                arr.frombytes(value)
                for i, loc in enumerate(arr):
                    if loc:
                        out[first + i] = loc
                it.next()
        finally:
            del it
        return out

    # -- ledger table --

    def ledgers(self) -> list[LedgerRecord]:
        out = []
        for key, value in self._ledgers.items():
            assert isinstance(key, bytes) and isinstance(value, bytes)
            (lid,) = _U64.unpack(key)
            out.append(LedgerRecord.unpack(lid, value))
        return out

    # -- log maps --

    def log_maps(self) -> dict[int, dict[int, int]]:
        out: dict[int, dict[int, int]] = {}
        for key, value in self._logs.items():
            assert isinstance(key, bytes) and isinstance(value, bytes)
            (log_id,) = _U64.unpack(key)
            m: dict[int, int] = {}
            for off in range(0, len(value), _MAP_ITEM.size):
                lid, n = _MAP_ITEM.unpack_from(value, off)
                m[lid] = n
            out[log_id] = m
        return out

    # -- checkpoint mark --

    def get_mark(self) -> bytes | None:
        value = self._meta.get(_MARK_KEY)
        return None if value is None else bytes(value)


__all__ = ["KEY", "SEGMENT_ENTRIES_MAX", "BookieIndex", "IndexBatch", "LedgerRecord", "pack_key"]

"""The bookie's index: entry locations, the ledger table, entry-log maps and the journal mark.

The ONLY bookie module that imports rocksdict (import-linter checks it); RocksDB errors are
translated to ``BookieIOError`` here.

One RocksDB instance, four column families, all written through one ``IndexBatch`` so a
checkpoint commits atomically (``sync=True``):
- ``default`` (locations): key = ledger id (u64 BE) | entry id (u64 BE), 16 bytes, so a
  ledger's entries are contiguous and sorted: range scans are iterations and "last entry of
  a ledger" is one ``seek_for_prev((ledger, 2**64-1))``. Value = location u64 BE
  (``log_id << 32 | offset``).
- ``ledgers``: key = ledger id (u64 BE); value = u8 flags (1 fenced) | i64 explicit LAC |
  master key bytes.
- ``logs``: key = log id (u64 BE); value = repeated (ledger u64, bytes u64): the log's map.
- ``meta``: ``b"mark"`` -> the 16-byte journal mark of the last checkpoint.
Must not know: asyncio, files other than its own directory, the journal format.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
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
FLAG_FENCED = 1
_CFS = ("ledgers", "logs", "meta")
_MARK_KEY = b"mark"
pack_key = KEY.pack
pack_location = _U64.pack


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

    def put_location(self, key: bytes, loc: bytes) -> None:
        """Hot path: ``key`` from ``pack_key``, ``loc`` from ``pack_location``."""
        self.wb.put(key, loc)

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
        try:
            if sync:
                self._db.write(batch.wb, self._sync)
            else:
                self._db.write(batch.wb)
        except Exception as exc:
            raise BookieIOError(f"index commit failed: {exc}") from exc

    # -- locations --

    def get_location(self, ledger_id: int, entry_id: int) -> int | None:
        value = self._db.get(pack_key(ledger_id, entry_id))
        if value is None:
            return None
        (loc,) = _U64.unpack(value)
        return int(loc)

    def last_entry(self, ledger_id: int) -> tuple[int, int] | None:
        """(entry id, location) of the ledger's highest entry, or None."""
        it = self._db.iter()
        try:
            it.seek_for_prev(pack_key(ledger_id, ENTRY_ID_MAX))
            if not it.valid():
                return None
            lid, eid = KEY.unpack(it.key())
            if lid != ledger_id:
                return None
            (loc,) = _U64.unpack(it.value())
            return eid, loc
        finally:
            del it

    def scan_ledger(self, ledger_id: int, first_entry_id: int = 0) -> Iterator[tuple[int, int]]:
        """(entry id, location) of the ledger's entries from ``first_entry_id`` on, in order."""
        it = self._db.iter()
        it.seek(pack_key(ledger_id, first_entry_id))
        while it.valid():
            lid, eid = KEY.unpack(it.key())
            if lid != ledger_id:
                break
            (loc,) = _U64.unpack(it.value())
            yield eid, loc
            it.next()
        del it

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


__all__ = ["KEY", "BookieIndex", "IndexBatch", "LedgerRecord", "pack_key", "pack_location"]

"""The bookie's read cache: entries recently read from entry logs, and read-ahead results.

Owns: a byte-bounded LRU keyed by (ledger id, entry id). On a disk miss the storage layer reads
the entry and then the following records of the same ledger in the same entry log
(``EntryLogger.read_following``) and puts them all here, so a catch-up reader going forward
hits memory (entries of one ledger are adjacent in a log because flushes are sorted).
Invariants: ``size_bytes <= bytes_max`` after every call; entries are immutable once written,
so a cached entry is never stale (a deleted ledger is dropped with ``drop_ledger``).
Must not know: files, the index.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

CachedEntry = tuple[int, int, bytes]
"""(lac, crc32c, payload)"""


@dataclass(frozen=True, slots=True)
class ReadCacheStatistics:
    entries: int
    size_bytes: int
    bytes_max: int
    hits: int
    misses: int


class ReadCache:
    def __init__(self, bytes_max: int = 64 * 1024 * 1024) -> None:
        self.bytes_max = bytes_max
        self.size_bytes = 0
        self._entries: OrderedDict[tuple[int, int], CachedEntry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"<ReadCache {len(self._entries)} entries {self.size_bytes}/{self.bytes_max}B>"

    def get(self, ledger_id: int, entry_id: int) -> CachedEntry | None:
        key = (ledger_id, entry_id)
        value = self._entries.get(key)
        if value is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return value

    def put(self, ledger_id: int, entry_id: int, lac: int, crc: int, payload: bytes) -> None:
        size = len(payload) + 64
        if size > self.bytes_max:
            return
        key = (ledger_id, entry_id)
        old = self._entries.pop(key, None)
        if old is not None:
            self.size_bytes -= len(old[2]) + 64
        self._entries[key] = (lac, crc, payload)
        self.size_bytes += size
        while self.size_bytes > self.bytes_max:
            _, evicted = self._entries.popitem(last=False)
            self.size_bytes -= len(evicted[2]) + 64

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self._entries if k[0] == ledger_id]:
            self.size_bytes -= len(self._entries.pop(key)[2]) + 64

    def clear(self) -> None:
        self._entries.clear()
        self.size_bytes = 0

    def statistics(self) -> ReadCacheStatistics:
        return ReadCacheStatistics(
            len(self._entries), self.size_bytes, self.bytes_max, self.hits, self.misses
        )

    def check_invariants(self) -> None:
        assert self.size_bytes <= self.bytes_max
        assert self.size_bytes == sum(len(v[2]) + 64 for v in self._entries.values())


__all__ = ["CachedEntry", "ReadCache", "ReadCacheStatistics"]

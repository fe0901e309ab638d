"""The broker entry cache: recent entries in memory so tailing readers skip the bookies.

Owns: a byte-bounded map from ``Position`` to payload, filled on add completion (positions
arrive in log order) and evicted oldest first, or up to a position (everything every
reader has passed). Must not know: cursors' semantics, bookies.
Invariant: ``size_bytes <= max_bytes`` after every call.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from magnetar.broker.ledger.position import Position


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    entries: int
    size_bytes: int
    max_bytes: int
    hits: int
    misses: int
    evictions: int


class EntryCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: collections.OrderedDict[Position, bytes] = collections.OrderedDict()
        self.size_bytes = 0
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, pos: Position, payload: bytes) -> None:
        if len(payload) > self.max_bytes or pos in self._entries:
            return
        self._entries[pos] = payload
        self.size_bytes += len(payload)
        while self.size_bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.size_bytes -= len(old)
            self.evictions += 1

    def get(self, pos: Position) -> bytes | None:
        payload = self._entries.get(pos)
        if payload is None:
            self.misses += 1
        else:
            self.hits += 1
        return payload

    def evict_before(self, pos: Position) -> None:
        """Drop every entry strictly before ``pos``."""
        while self._entries:
            first = next(iter(self._entries))
            if first >= pos:
                break
            self.size_bytes -= len(self._entries.pop(first))
            self.evictions += 1

    def evict_ledger(self, ledger_id: int) -> None:
        for pos in [p for p in self._entries if p.ledger_id == ledger_id]:
            self.size_bytes -= len(self._entries.pop(pos))

    def clear(self) -> None:
        self._entries.clear()
        self.size_bytes = 0

    def statistics(self) -> CacheStatistics:
        return CacheStatistics(
            len(self._entries),
            self.size_bytes,
            self.max_bytes,
            self.hits,
            self.misses,
            self.evictions,
        )


__all__ = ["CacheStatistics", "EntryCache"]

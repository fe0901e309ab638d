"""The broker entry cache: recent entries in memory so tailing readers skip the bookies.

Owns: a byte-bounded map from ``Position`` to payload, filled on add completion (positions
arrive in log order) and evicted oldest first, or up to a position (everything every
reader has passed). Must not know: cursors' semantics, bookies.
Invariant: ``size_bytes <= max_bytes`` after every call.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
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
    """Keys are ``(ledger_id, entry_id)`` tuples inside (hashed and compared in C: this
    is filled once per confirmed entry); the API takes ``Position``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: collections.OrderedDict[tuple[int, int], bytes] = collections.OrderedDict()
        self.size_bytes = 0
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, pos: Position, payload: bytes) -> None:
        self.put_entries(pos.ledger_id, pos.entry_id, (payload,))

    def put_entries(self, ledger_id: int, first_entry_id: int, payloads: Sequence[bytes]) -> None:
        """Entries ``first_entry_id``, ``first_entry_id + 1``, ... of one ledger, in order."""
        entries = self._entries
        max_bytes = self.max_bytes
        size = self.size_bytes
        entry_id = first_entry_id
        for payload in payloads:
            key = (ledger_id, entry_id)
            entry_id += 1
            n = len(payload)
            if n > max_bytes or key in entries:
                continue
            entries[key] = payload
            size += n
            while size > max_bytes:
                _, old = entries.popitem(last=False)
                size -= len(old)
                self.evictions += 1
        self.size_bytes = size

    def get(self, pos: Position) -> bytes | None:
        payload = self._entries.get((pos.ledger_id, pos.entry_id))
        if payload is None:
            self.misses += 1
        else:
            self.hits += 1
        return payload

    def evict_before(self, pos: Position) -> None:
        """Drop every entry strictly before ``pos``."""
        limit = (pos.ledger_id, pos.entry_id)
        while self._entries:
            first = next(iter(self._entries))
            if first >= limit:
                break
            self.size_bytes -= len(self._entries.pop(first))
            self.evictions += 1

    def evict_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self._entries if k[0] == ledger_id]:
            self.size_bytes -= len(self._entries.pop(key))

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

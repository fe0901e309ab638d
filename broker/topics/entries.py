"""What topics read from a stored entry, through the codec's functions.

Owns: the per-entry readers a topic hands its subscriptions besides the codec's own
(``entry_deliver_at`` and ``entry_chunk`` take bytes and go to dispatchers as they are):
``slot_of`` (Key_Shared, by entry), ``never_delayed`` (delayed delivery off) and
``publish_time_or_zero`` (a search by publish time: an unreadable entry counts as old); and
``EntryCounts``, a topic's cache of its entries' message counts (what an entry costs in
permits), so what was published here is never parsed again to be counted.
Invariant (``EntryCounts``): an entry in the reported span [first, last] absent from the
cache is a single message; outside it, or before its append was reported (a dispatcher can
read an entry between its storage and that report), it is counted from its bytes.
Must not know: cursors, consumers, the wire layout of an entry (the codec's).
"""

from __future__ import annotations

from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import Entry
from magnetar.client.protocol import (
    RemoteProtocolError,
    entry_num_messages,
    entry_publish_time,
    entry_slot,
)

COUNTS_MAX = 200_000
"""Batch entries whose count a topic remembers; beyond, it forgets them all (older entries are
parsed again)."""


def slot_of(entry: Entry) -> int:
    """Key_Shared slot of an entry (its outer metadata's sticky key)."""
    return entry_slot(entry.data)


def never_delayed(data: bytes) -> int:
    """``entry_deliver_at`` of a topic whose delayed delivery is off."""
    return 0


def publish_time_or_zero(data: bytes) -> int:
    """An entry's publish time; 0 for bytes without readable metadata (a search by time
    treats them as old, as a scan skipping them would)."""
    try:
        return entry_publish_time(data)
    except RemoteProtocolError:
        return 0


class EntryCounts:
    """Message counts of one topic's entries: batch entries published here are remembered;
    single messages are not stored at all (absent inside the reported span = one)."""

    __slots__ = ("_counts", "_first", "_last")

    def __init__(self) -> None:
        self._counts: dict[Position, int] = {}
        self._first: Position | None = None
        self._last: Position | None = None

    def __repr__(self) -> str:
        return f"<EntryCounts {len(self._counts)} batches in [{self._first}, {self._last}]>"

    def count_of(self, entry: Entry) -> int:
        """Messages in ``entry`` (1 when its metadata cannot be read)."""
        pos = entry.position
        counts = self._counts
        if counts:  # empty while no batch entry was published since load: no hashing
            n = counts.get(pos)
            if n is not None:
                return n
        if self._single_if_absent(pos):
            return 1
        try:
            n = entry_num_messages(entry.data)
        except RemoteProtocolError:
            n = 1
        if n > 1:
            self.remember(pos, n)
        return n

    def known(self, pos: Position) -> int | None:
        """Messages in the entry at ``pos`` if known without reading it."""
        n = self._counts.get(pos)
        if n is None and self._single_if_absent(pos):
            n = 1
        return n

    def _single_if_absent(self, pos: Position) -> bool:
        first, last = self._first, self._last
        return first is not None and last is not None and first <= pos <= last

    def remember(self, pos: Position, n: int) -> None:
        if len(self._counts) >= COUNTS_MAX:  # forget: older entries get parsed again
            self._counts.clear()
            self._first = self._last = None
        self._counts[pos] = n

    def reporting(self, first: Position) -> None:
        """An append starting at ``first`` is being reported (its counts remembered next)."""
        if self._first is None:
            self._first = first

    def reported(self, last: Position) -> None:
        """The counts of the append ending at ``last`` are remembered: absent = single."""
        if self._first is not None:
            self._last = last


__all__ = [
    "COUNTS_MAX",
    "EntryCounts",
    "never_delayed",
    "publish_time_or_zero",
    "slot_of",
]

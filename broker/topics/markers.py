"""Markers in a topic (``client.protocol.markers``): stored, never delivered, never a backlog.

Owns: ``TopicMarkers`` (whether a topic may hold markers: durable as the managed-ledger
property ``pulsar.markers``, set before the first marker is written or as soon as one is
received; and the last entry that is a message, what GetLastMessageId answers so that a
reader whose topic ends with markers is not told there is more to read: Pulsar issue 22572),
and ``MarkerSkippingCursor``, the cursor every subscription of a persistent topic reads
through: while the topic may hold markers (``active()``), entries that are markers are left
out of what a read returns and acknowledged on the cursor at once, so no consumer or reader
ever receives one and a subscription's backlog never counts one it passed; a read that finds
only markers reads on (a reader at the end of a topic whose last entries are markers gets
nothing, and waits, as for an empty tail). Every other operation is the wrapped cursor's.
Markers written or received while a subscription exists are acknowledged on it when they are
stored (``PersistentTopic``), so a subscription without consumers does not pile them up
either; this cursor catches those stored before a subscription was made or a seek moved
back over them.
Must not know: what markers say (``replication/`` reads them), dispatch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import Entry, TopicCursor, TopicLedger
from magnetar.client.protocol import RemoteProtocolError, entry_marker_type

log = logging.getLogger(__name__)

MARKERS_PROPERTY = "pulsar.markers"
"""Managed-ledger property: the topic may hold markers (its readers filter them)."""
LAST_DATA_SCAN_MAX = 4096
"""Entries read back from the end, on load, to find the last message behind markers."""


def is_marker(data: bytes) -> bool:
    try:
        return entry_marker_type(data) != 0
    except RemoteProtocolError:
        return False  # unreadable entries are the dispatcher's to decide about


class MarkerSkippingCursor:
    """A ``TopicCursor`` leaving markers out of reads (see the module docstring)."""

    def __init__(self, cursor: TopicCursor, active: Callable[[], bool]) -> None:
        self.inner = cursor
        self.name = cursor.name
        self.durable = cursor.durable
        self._active = active
        self.markers_skipped = 0

    def __repr__(self) -> str:
        return f"<MarkerSkippingCursor {self.inner!r}>"

    @property
    def mark_delete_position(self) -> Position:
        return self.inner.mark_delete_position

    @property
    def read_position(self) -> Position:
        return self.inner.read_position

    def is_acked(self, position: Position) -> bool:
        return self.inner.is_acked(position)

    def batch_ack_set(self, position: Position) -> list[int] | None:
        return self.inner.batch_ack_set(position)

    async def read_entries(self, max_entries: int) -> list[Entry]:
        while True:
            entries = await self.inner.read_entries(max_entries)
            if not entries or not self._active():
                return entries
            markers = [e.position for e in entries if is_marker(e.data)]
            if not markers:
                return entries
            self.markers_skipped += len(markers)
            await self.inner.ack(markers)
            if len(markers) < len(entries):
                skip = set(markers)
                return [e for e in entries if e.position not in skip]

    async def read_positions(self, positions: list[Position]) -> list[Entry]:
        return await self.inner.read_positions(positions)

    async def ack(self, positions: Iterable[Position]) -> None:
        await self.inner.ack(positions)

    async def ack_batch_index(self, position: Position, ack_set: list[int], size: int) -> bool:
        return await self.inner.ack_batch_index(position, ack_set, size)

    def redelivery_count(self, position: Position) -> int:
        return self.inner.redelivery_count(position)

    async def increment_redelivery(self, position: Position) -> int:
        return await self.inner.increment_redelivery(position)

    async def ack_cumulative(self, position: Position) -> None:
        await self.inner.ack_cumulative(position)

    def rewind(self) -> None:
        self.inner.rewind()

    def seek(self, position: Position) -> None:
        self.inner.seek(position)

    async def reset(self, position: Position) -> None:
        await self.inner.reset(position)

    def backlog(self) -> int:
        return self.inner.backlog()

    def backlog_size(self) -> int:
        return self.inner.backlog_size()


class TopicMarkers:
    """A persistent topic's markers (see the module docstring)."""

    def __init__(self, ledger: TopicLedger) -> None:
        self._ledger = ledger
        self.possible = ledger.properties.get(MARKERS_PROPERTY) == "true"
        self.last_data: Position | None = ledger.last_confirmed
        """The last entry that is a message (None: none is)."""
        self._stored = self.possible

    def __repr__(self) -> str:
        return f"<TopicMarkers possible={self.possible} last_data={self.last_data}>"

    def active(self) -> bool:
        return self.possible

    async def load(self) -> None:
        """Find the last message when the topic may end with markers."""
        if self.possible:
            self.last_data = await self._last_message()

    async def expect(self) -> None:
        """Markers may be written from now on: readers filter them, durably."""
        self.possible = True
        if not self._stored:
            await self._ledger.set_property(MARKERS_PROPERTY, "true")
            self._stored = True

    def received(self) -> bool:
        """A marker was stored: True when the property still has to be written."""
        self.possible = True
        return not self._stored

    def message_stored(self, position: Position) -> None:
        self.last_data = position

    async def _last_message(self) -> Position | None:
        last = self._ledger.last_confirmed
        if last is None or last.entry_id < 0:
            return last
        budget = LAST_DATA_SCAN_MAX
        for ledger_id, entries, _ in reversed(self._ledger.ledger_sizes()):
            end = entries - 1 if ledger_id != last.ledger_id else last.entry_id
            while end >= 0 and budget > 0:
                start = max(0, end - 63)
                got = await self._ledger.read_entries(Position(ledger_id, start), end - start + 1)
                budget -= len(got)
                for entry in reversed([e for e in got if e.position.ledger_id == ledger_id]):
                    if not is_marker(entry.data):
                        return entry.position
                end = start - 1
            if budget <= 0:
                break
        log.info("%s: no message among its last entries: all markers", self._ledger.name)
        return None


__all__ = [
    "LAST_DATA_SCAN_MAX",
    "MARKERS_PROPERTY",
    "MarkerSkippingCursor",
    "TopicMarkers",
    "is_marker",
]

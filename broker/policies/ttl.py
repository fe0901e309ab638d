"""Message expiry (TTL): auto-acknowledge the messages of a subscription older than a cutoff.

Owns: ``expire_messages`` — find the newest entry published at or before the cutoff from the
subscription's mark-delete position on (publish time from the entry's ``MessageMetadata``),
and move the mark-delete position there (the subscription's ``skip_to``: a cumulative
acknowledgement on the cursor, so the state is durable and trimming follows, and
dispatched-but-unacknowledged messages up to there are forgotten). Also used by the
``message_age`` backlog quota's eviction.

Finding the boundary, as Pulsar's expiry monitor (``findNewestMatching``): entries are taken
to be in publish-time order, so on a managed ledger it is a binary search over the entries
(the ledger's ``find_by_publish_time``: about log2(entries) single-entry reads), whatever the
backlog: one check expires a backlog of millions. A linear scan was bounded to
``EXPIRY_SCAN_MAX_ENTRIES`` per check (one check every 5 minutes by default: a 1,000,000-entry
backlog took 20 checks, 100 minutes, to expire). Other storage (the in-memory ledger), or a
search that fails (a ledger trimmed meanwhile), uses the linear scan: reads of
``EXPIRY_READ_ENTRIES`` from the mark-delete position, stopping at the first younger entry.
Must not know: policies, clocks (the caller passes the cutoff), the wire protocol.
"""

from __future__ import annotations

import logging

from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import TopicLedger
from magnetar.broker.topics.entries import publish_time_or_zero
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.subscription import Subscription
from magnetar.client.protocol import RemoteProtocolError, entry_publish_time

log = logging.getLogger(__name__)

EXPIRY_SCAN_MAX_ENTRIES = 50_000
EXPIRY_READ_ENTRIES = 500


def next_position(pos: Position) -> Position:
    return Position(pos.ledger_id, pos.entry_id + 1)


def publish_time_of(data: bytes) -> int | None:
    """An entry's publish time, None when its metadata cannot be read (skipped)."""
    try:
        return entry_publish_time(data)
    except RemoteProtocolError:
        return None


class LedgerSpans:
    """Entries of a managed ledger numbered 0.. in ledger order, from its ledger sizes
    (ledgers hold entries 0..n-1 with no holes): position <-> index without reading."""

    __slots__ = ("spans", "total")

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.spans = spans  # (ledger id, entries), ledgers with entries, in order
        self.total = sum(n for _, n in spans)

    @classmethod
    def of(cls, ml: TopicLedger) -> LedgerSpans:
        return cls([(lid, n) for lid, n, _ in ml.ledger_sizes() if n > 0])

    def index_of(self, pos: Position) -> int:
        """Index of ``pos`` (one past its ledger's end allowed; before the first ledger: 0;
        after the last: ``total``)."""
        base = 0
        for lid, n in self.spans:
            if pos.ledger_id < lid:
                return base
            if pos.ledger_id == lid:
                return base + min(max(pos.entry_id, 0), n)
            base += n
        return self.total

    def at(self, index: int) -> Position:
        for lid, n in self.spans:
            if index < n:
                return Position(lid, index)
            index -= n
        raise IndexError(index)


async def find_expired(
    topic: PersistentTopic, start: Position, cutoff_ms: int
) -> tuple[Position | None, int]:
    """(newest position published at or before ``cutoff_ms`` from ``start`` on, entries)."""
    try:
        return await find_expired_by_search(topic.ledger, start, cutoff_ms)
    except Exception as exc:  # e.g. a ledger trimmed under the search: scan instead
        log.debug("expiry search failed on %s (%r): scanning", topic.ledger, exc)
    return await _find_expired_by_scan(topic, start, cutoff_ms)


async def find_expired_by_search(
    ml: TopicLedger, start: Position, cutoff_ms: int
) -> tuple[Position | None, int]:
    """``find_expired`` on a managed ledger: binary search for the first entry published
    after ``cutoff_ms``; the newest expired entry is the one before it (or the last entry).
    Entries are numbered in ledger order from the ledger's own sizes (a snapshot: entries
    added during the search are not expired by it)."""
    spans = LedgerSpans.of(ml)
    if spans.total == 0:
        return None, 0
    younger = await ml.find_by_publish_time(cutoff_ms + 1, publish_time_or_zero)
    newest = (spans.index_of(younger) if younger is not None else spans.total) - 1
    first = spans.index_of(start)
    if newest < first:
        return None, 0
    return spans.at(newest), newest - first + 1


async def _find_expired_by_scan(
    topic: PersistentTopic, start: Position, cutoff_ms: int
) -> tuple[Position | None, int]:
    last = topic.ledger.last_confirmed
    if last is None:
        return None, 0
    found: Position | None = None
    count = 0
    scanned = 0
    pos = start
    while scanned < EXPIRY_SCAN_MAX_ENTRIES and pos <= last:
        entries = await topic.ledger.read_entries(pos, EXPIRY_READ_ENTRIES)
        if not entries:
            break
        for entry in entries:
            if entry.position < start:
                continue
            t = publish_time_of(entry.data)
            if t is not None and t > cutoff_ms:
                return found, count
            found = entry.position
            count += 1
        scanned += len(entries)
        if entries[-1].position >= last:
            break
        pos = next_position(entries[-1].position)
    return found, count


async def expire_messages(topic: PersistentTopic, sub: Subscription, cutoff_ms: int) -> int:
    """Expire ``sub``'s messages published at or before ``cutoff_ms``; returns entries."""
    if topic.closed:
        return 0
    start = next_position(sub.cursor.mark_delete_position)
    found, count = await find_expired(topic, start, cutoff_ms)
    if found is None or found <= sub.cursor.mark_delete_position:
        return 0
    await sub.skip_to(found)
    log.info("%s/%s: expired %d entries up to %s", topic.full_name, sub.name, count, found)
    return count


__all__ = [
    "EXPIRY_SCAN_MAX_ENTRIES",
    "LedgerSpans",
    "expire_messages",
    "find_expired",
    "find_expired_by_search",
    "next_position",
    "publish_time_of",
]

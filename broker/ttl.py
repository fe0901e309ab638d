"""Message expiry (TTL): auto-acknowledge the messages of a subscription older than a cutoff.

Owns: ``expire_messages`` — scan from the subscription's mark-delete position forward (at
most ``EXPIRY_SCAN_MAX_ENTRIES`` per call, in reads of ``EXPIRY_READ_ENTRIES``), find the
newest entry published at or before the cutoff (publish time from the entry's
``MessageMetadata``; entries are in publish order per producer, and the scan stops at the
first younger entry, as Pulsar's expiry monitor does), and move the mark-delete position
there (a cumulative acknowledgement on the cursor, so the state is durable and trimming
follows). Dispatched-but-unacknowledged messages up to there are forgotten by the
dispatcher. Also used by the ``message_age`` backlog quota's eviction.
Must not know: policies, clocks (the caller passes the cutoff), the wire protocol.
"""

from __future__ import annotations

import logging
from typing import Any

from magnetar.broker.frames import parse_metadata
from magnetar.broker.ledger.position import Position

log = logging.getLogger(__name__)

EXPIRY_SCAN_MAX_ENTRIES = 50_000
EXPIRY_READ_ENTRIES = 500


def next_position(pos: Position) -> Position:
    return Position(pos.ledger_id, pos.entry_id + 1)


def publish_time_of(data: bytes) -> int | None:
    try:
        return int(parse_metadata(data).publish_time)
    except Exception:
        return None


async def find_expired(topic: Any, start: Position, cutoff_ms: int) -> tuple[Position | None, int]:
    """(newest position published at or before ``cutoff_ms`` from ``start`` on, entries)."""
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


async def skip_to(sub: Any, position: Position) -> None:
    """Move the subscription's mark-delete to ``position`` (cumulative ack) and let the
    dispatcher forget what it had handed out up to there."""
    d = sub.dispatcher
    unblocked = False
    if d is not None:
        unblocked = d.forget_up_to(position)
    else:
        for pos in [p for p in sub.redelivery if p <= position]:
            sub.redelivery.pop(pos, None)
    await sub.cursor.ack_cumulative(position)
    after_ack = getattr(sub, "_after_ack", None)
    if after_ack is not None:
        after_ack(unblocked)
    elif d is not None:
        d.schedule()


async def expire_messages(topic: Any, sub: Any, cutoff_ms: int) -> int:
    """Expire ``sub``'s messages published at or before ``cutoff_ms``; returns entries."""
    if getattr(topic, "closed", False):
        return 0
    start = next_position(sub.cursor.mark_delete_position)
    found, count = await find_expired(topic, start, cutoff_ms)
    if found is None or found <= sub.cursor.mark_delete_position:
        return 0
    await skip_to(sub, found)
    log.info("%s/%s: expired %d entries up to %s", topic.full_name, sub.name, count, found)
    return count


__all__ = ["EXPIRY_SCAN_MAX_ENTRIES", "expire_messages", "find_expired", "skip_to"]

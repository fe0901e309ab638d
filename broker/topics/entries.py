"""What topics read from a stored entry, through the codec's functions.

Owns: the per-entry readers a topic hands its subscriptions besides the codec's own
(``entry_deliver_at`` and ``entry_chunk`` take bytes and go to dispatchers as they are):
``slot_of`` (Key_Shared, by entry), ``never_delayed`` (delayed delivery off) and
``publish_time_or_zero`` (a search by publish time: an unreadable entry counts as old).
Must not know: cursors, consumers, the wire layout of an entry (the codec's).
"""

from __future__ import annotations

from magnetar.broker.storage.contract import Entry
from magnetar.client.protocol import (
    RemoteProtocolError,
    entry_publish_time,
    entry_slot,
)


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


__all__ = [
    "never_delayed",
    "publish_time_or_zero",
    "slot_of",
]

"""A consumer attached to a subscription: permits, pending (dispatched, unacked) entries.

Owns: per-consumer flow-control state (permits granted by FLOW minus messages sent, which may
go negative for a batch larger than the remaining permits, as Java), the pending map
position -> message count, the unacked-messages count and the blocked flag with its
block-at-limit / resume-at-half rule. Sending goes through ``ConsumerSink`` (the
connection). Must not know: the cursor, other consumers, sockets.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from magnetar.broker.ledger.position import Position


class SubType(enum.IntEnum):
    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


_TRACKS_UNACKED = (SubType.SHARED, SubType.KEY_SHARED)


class OutMessage(NamedTuple):
    """One entry to send to one consumer (a tuple: built once per dispatched entry)."""

    position: Position
    data: bytes
    redelivery_count: int = 0
    ack_set: list[int] | None = None


class ConsumerSink(Protocol):
    def send_messages(self, consumer: Consumer, messages: list[OutMessage]) -> None: ...

    def send_active_consumer_change(self, consumer: Consumer, is_active: bool) -> None: ...

    def send_close_consumer(self, consumer: Consumer) -> None: ...

    def send_reached_end_of_topic(self, consumer: Consumer) -> None: ...


@dataclass(frozen=True, slots=True)
class ConsumerStats:
    consumer_name: str
    available_permits: int
    unacked_messages: int
    blocked: bool
    msg_out_counter: int


class Consumer:
    def __init__(
        self,
        consumer_id: int,
        name: str,
        sub_type: SubType,
        *,
        priority: int = 0,
        sink: ConsumerSink | None = None,
        max_unacked: int = 50_000,
        address: str = "",
        is_reader: bool = False,
        partition_index: int = -1,
        key_shared_mode: int = 0,
        hash_ranges: list[tuple[int, int]] | None = None,
        allow_out_of_order: bool = False,
    ) -> None:
        self.consumer_id = consumer_id
        self.name = name
        self.sub_type = sub_type
        self.priority = priority
        self.sink = sink
        self.max_unacked = max_unacked
        self.address = address
        self.is_reader = is_reader
        self.partition_index = partition_index
        self.key_shared_mode = key_shared_mode  # 0 AUTO_SPLIT, 1 STICKY
        self.hash_ranges = list(hash_ranges or [])  # inclusive slot ranges (STICKY)
        self.allow_out_of_order = allow_out_of_order  # KeySharedMeta.allowOutOfOrderDelivery
        self.permits = 0
        self.pending: dict[Position, int] = {}
        self.unacked = 0
        self.blocked = False
        self.msg_out = 0
        self.closed = False
        self.paused = False  # the connection's write buffer is full: dispatch elsewhere/later
        self.told_end_of_topic = False  # REACHED_END_OF_TOPIC sent (once per consumer)
        self.connected_since = ""  # Pulsar's ConsumerStats.connectedSince (ISO 8601, UTC)

    def __repr__(self) -> str:
        return (
            f"<Consumer {self.consumer_id} {self.name!r} permits={self.permits} "
            f"unacked={self.unacked}{' blocked' if self.blocked else ''}>"
        )

    @property
    def available(self) -> bool:
        return self.permits > 0 and not self.blocked and not self.closed and not self.paused

    def flow(self, permits: int) -> None:
        self.permits += permits

    def on_dispatched(self, position: Position, count: int) -> None:
        self.permits -= count
        self.msg_out += count
        pending = self.pending
        before = len(pending)
        pending[position] = count  # one lookup: the size tells whether it was new
        if len(pending) != before:
            self.unacked += count
        if (
            self.max_unacked > 0
            and self.unacked >= self.max_unacked
            and self.sub_type in _TRACKS_UNACKED
        ):
            self.blocked = True

    def on_removed(self, position: Position) -> bool:
        """Forget a pending entry (acked or to be redelivered); True if it unblocked us."""
        count = self.pending.pop(position, None)
        if count is None:
            return False
        self.unacked -= count
        if self.blocked and self.unacked <= self.max_unacked // 2:
            self.blocked = False
            return True
        return False

    def take_all_pending(self) -> list[Position]:
        positions = sorted(self.pending)
        self.pending.clear()
        self.unacked = 0
        self.blocked = False
        return positions

    def statistics(self) -> ConsumerStats:
        return ConsumerStats(self.name, self.permits, self.unacked, self.blocked, self.msg_out)

    def check_invariants(self) -> None:
        assert self.unacked == sum(self.pending.values()), self
        assert self.unacked >= 0


__all__ = ["Consumer", "ConsumerSink", "ConsumerStats", "OutMessage", "SubType"]

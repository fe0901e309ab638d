"""Non-persistent topics: messages go straight from producers to connected consumers.

Owns: ``NonPersistentTopic`` and ``NonPersistentSubscription`` (Pulsar's semantics: nothing
is stored; a message reaches the consumers attached at publish time that have permits, and
is dropped for a subscription whose chosen consumer has none; the client sends no acks;
a subscription disappears with its last consumer; seek is refused). Consumer selection
reuses the pure rules of ``dispatchers.py`` (active consumer for Exclusive/Failover, round
robin over permits for Shared, the key selector for Key_Shared).
Message ids: a per-topic ledger id from the same counter as in-memory ledgers, entry ids
counting up, so ids are unique per topic and never negative (reference pitfall 17).
Must not know: sockets, storage.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.dispatch.dispatchers import next_shared_consumer, pick_active_consumer
from magnetar.broker.dispatch.key_shared import KeySharedMode, KeySharedSelector
from magnetar.broker.errors import ServerError
from magnetar.broker.ledger.position import Position
from magnetar.broker.naming import TopicName
from magnetar.broker.storage.contract import Entry
from magnetar.broker.storage.memory import next_ledger_id
from magnetar.broker.topics.persistent import LastMessageId, PersistentTopic, TopicCounters
from magnetar.broker.topics.producer import Admission, Deduplication, Producer, ProducerRegistry
from magnetar.broker.topics.subscription import SubscriptionError
from magnetar.client.protocol import entry_num_messages

log = logging.getLogger(__name__)


class _NoCursor:
    durable = False

    def backlog(self) -> int:
        return 0

    @property
    def mark_delete_position(self) -> Position:
        return Position(-1, -1)

    @property
    def read_position(self) -> Position:
        return Position(-1, -1)


@dataclass(slots=True)
class _Stats:
    name: str
    type: str
    durable: bool
    consumers: int
    backlog: int
    unacked: int
    mark_delete: str
    read_position: str


class NonPersistentSubscription:
    def __init__(self, topic_name: str, name: str, partition_index: int) -> None:
        self.topic_name = topic_name
        self.name = name
        self.partition_index = partition_index
        self.sub_type: SubType | None = None
        self._consumers: list[Consumer] = []
        self._rr = 0
        self._selector: KeySharedSelector[Consumer] | None = None
        self._active: Consumer | None = None
        self.cursor = _NoCursor()
        self.dropped = 0

    def __repr__(self) -> str:
        return f"<NonPersistentSubscription {self.topic_name} {self.name!r}>"

    durable = False

    @property
    def consumers(self) -> list[Consumer]:
        return list(self._consumers)

    def add_consumer(self, consumer: Consumer) -> None:
        stype = consumer.sub_type
        if self._consumers:
            if stype is not self.sub_type:
                raise SubscriptionError(
                    ServerError.ConsumerBusy, "Subscription is of different type"
                )
            if stype is SubType.EXCLUSIVE:
                raise SubscriptionError(
                    ServerError.ConsumerBusy, "Exclusive consumer is already connected"
                )
        else:
            self.sub_type = stype
            self._selector = None
        if stype is SubType.KEY_SHARED:
            if self._selector is None:
                self._selector = KeySharedSelector(KeySharedMode(consumer.key_shared_mode))
            try:
                self._selector.add_consumer(consumer, consumer.name, consumer.hash_ranges)
            except ValueError as exc:
                raise SubscriptionError(ServerError.ConsumerAssignError, str(exc)) from None
        self._consumers.append(consumer)
        self._elect()

    def _elect(self) -> None:
        if self.sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
            return
        new = pick_active_consumer(self._consumers, self.partition_index)
        if new is not self._active:
            self._active = new
            if self.sub_type is not SubType.FAILOVER:  # Pulsar tells Failover consumers only
                return
            for c in self._consumers:
                if c.sink is not None:
                    c.sink.send_active_consumer_change(c, c is new)

    def remove_consumer(self, consumer: Consumer) -> None:
        consumer.closed = True
        if consumer in self._consumers:
            self._consumers.remove(consumer)
        if self._selector is not None:
            self._selector.remove_consumer(consumer)
        if consumer is self._active:
            self._active = None
        self._elect()

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.flow(permits)

    def deliver(self, entry: Entry, count: int, slot_of: Any) -> None:
        """Send one published entry to this subscription's consumer, or drop it."""
        target: Consumer | None
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            target = self._active
        elif self.sub_type is SubType.KEY_SHARED and self._selector is not None:
            try:
                target = self._selector.select(slot_of(entry))
            except Exception:
                target = None
        else:
            idx = next_shared_consumer(self._consumers, self._rr)
            target = None if idx is None else self._consumers[idx]
            if idx is not None:
                self._rr = idx + 1
        if target is None or target.permits <= 0 or target.closed:
            self.dropped += count
            return
        target.permits -= count
        target.msg_out += count
        if target.sink is not None:
            target.sink.send_messages(target, [OutMessage(entry.position, entry.data)])

    # no acknowledgements or redelivery for non-persistent topics
    async def ack_individual(self, consumer: Consumer, acks: Any) -> None:
        return None

    async def ack_positions(self, consumer: Consumer, whole: Any, partial: Any = None) -> None:
        return None

    async def ack_cumulative(self, consumer: Consumer, position: Position) -> None:
        return None

    def redeliver(self, consumer: Consumer, positions: Any) -> None:
        return None

    async def settle_acks(self) -> None:
        return None

    async def reset_cursor(self, position: Position) -> list[Consumer]:
        raise SubscriptionError(
            ServerError.NotAllowedError, "Seek is not supported on non-persistent topics"
        )

    def statistics(self) -> _Stats:
        return _Stats(
            self.name,
            self.sub_type.name.title() if self.sub_type else "None",
            False,
            len(self._consumers),
            0,
            0,
            "-1:-1",
            "-1:-1",
        )

    def close(self) -> None:
        self._consumers.clear()


class _NoLedger:
    total_size = 0
    num_entries = 0


class NonPersistentTopic:
    def __init__(self, name: TopicName) -> None:
        self.name = name
        self.producers = ProducerRegistry()
        self.dedup = Deduplication(False)
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.counters = TopicCounters()
        self.ledger = _NoLedger()
        self._ledger_id = next_ledger_id()
        self._entry_ids = itertools.count()
        self._last: Position | None = None
        self.closed = False

    def __repr__(self) -> str:
        return f"<NonPersistentTopic {self.name} subs={len(self.subscriptions)}>"

    @property
    def full_name(self) -> str:
        return self.name.full

    def add_producer(self, producer: Producer) -> Admission:
        return self.producers.admit(producer)

    def remove_producer(self, producer: Producer) -> list[Producer]:
        return self.producers.remove(producer)

    async def persist_topic_epoch(self) -> None:
        """Nothing to persist: as Pulsar's, a non-persistent topic's epoch lives in memory."""

    def epoch_not_stored(self) -> None:
        """Never called: storing nothing cannot fail."""

    def last_sequence_id(self, producer_name: str) -> int:
        return -1

    async def create_subscription(self, sub_name: str, *, earliest: bool = True) -> None:
        return None  # nothing is retained: a subscription without consumers is meaningless

    def publish(  # noqa: PLR0917 - same call shape as PersistentTopic.publish
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        num_msgs: int,
        data: bytes,
        callback: Any,
        *,
        check_dedup: bool = True,
    ) -> None:
        pos = Position(self._ledger_id, next(self._entry_ids))
        self._last = pos
        self.counters.msg_in += num_msgs
        self.counters.bytes_in += len(data)
        self.counters.entries_in += 1
        entry = Entry(pos, data)
        for sub in list(self.subscriptions.values()):
            sub.deliver(entry, num_msgs, PersistentTopic.slot_of)
        callback(pos, None)

    async def subscribe(
        self,
        consumer: Consumer,
        sub_name: str,
        *,
        durable: bool = True,
        initial_earliest: bool = False,
        start: Position | None = None,
    ) -> NonPersistentSubscription:
        sub = self.subscriptions.get(sub_name)
        if sub is None:
            sub = NonPersistentSubscription(self.full_name, sub_name, self.name.partition_index)
            self.subscriptions[sub_name] = sub
        try:
            sub.add_consumer(consumer)
        except SubscriptionError:
            if not sub.consumers:
                self.subscriptions.pop(sub_name, None)
            raise
        return sub

    def remove_consumer(self, sub: NonPersistentSubscription, consumer: Consumer) -> None:
        sub.remove_consumer(consumer)
        if not sub.consumers and self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]

    async def unsubscribe(self, sub: NonPersistentSubscription, consumer: Consumer | None) -> None:
        if [c for c in sub.consumers if c is not consumer]:
            raise SubscriptionError(
                ServerError.ConsumerBusy, "Subscription has other connected consumers"
            )
        if consumer is not None:
            self.remove_consumer(sub, consumer)
        self.subscriptions.pop(sub.name, None)

    async def delete_subscription(self, sub_name: str, *, force: bool) -> list[Consumer]:
        sub = self.subscriptions.get(sub_name)
        if sub is None:
            raise SubscriptionError(ServerError.SubscriptionNotFound, "Subscription not found")
        dropped = sub.consumers
        if dropped and not force:
            raise SubscriptionError(ServerError.ConsumerBusy, "Subscription has active consumers")
        for c in dropped:
            if c.sink is not None:
                c.sink.send_close_consumer(c)
        self.subscriptions.pop(sub_name, None)
        return dropped

    async def find_position_by_time(self, publish_time_ms: int) -> Position:
        raise SubscriptionError(
            ServerError.NotAllowedError, "Seek is not supported on non-persistent topics"
        )

    async def resolve_last_message_id(self, sub: Any) -> LastMessageId:
        last = self._last or Position(self._ledger_id, -1)
        return LastMessageId(last.ledger_id, last.entry_id, -1, None)

    def count_of(self, entry: Entry) -> int:
        return entry_num_messages(entry.data)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for producer in list(self.producers.producers.values()) + list(self.producers.waiting):
            if producer.cnx is not None:
                producer.cnx.send_close_producer(producer)
            self.producers.remove(producer)
        for sub in list(self.subscriptions.values()):
            for consumer in sub.consumers:
                if consumer.sink is not None:
                    consumer.sink.send_close_consumer(consumer)
                sub.remove_consumer(consumer)
        self.subscriptions.clear()

    def stats(self) -> dict[str, Any]:
        return {
            "msgInCounter": self.counters.msg_in,
            "bytesInCounter": self.counters.bytes_in,
            "storageSize": 0,
            "publishers": [
                {"producerName": p.name, "producerId": p.producer_id}
                for p in self.producers.producers.values()
            ],
            "subscriptions": {
                name: {
                    "type": s.statistics().type,
                    "msgDropRate": 0.0,
                    "msgDropped": s.dropped,
                    "consumers": [{"consumerName": c.name} for c in s.consumers],
                }
                for name, s in self.subscriptions.items()
            },
        }


__all__ = ["NonPersistentSubscription", "NonPersistentTopic"]

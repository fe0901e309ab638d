"""Non-persistent topics: messages go straight from producers to connected consumers.

Owns: ``NonPersistentTopic`` and ``NonPersistentSubscription``, a ``Topic`` and its
``TopicSubscription`` with Pulsar's semantics: nothing is stored; a message reaches the
consumers attached at publish time that have permits, and is dropped for a subscription whose
chosen consumer has none; the client sends no acks; a subscription disappears with its last
consumer; seek and read_compacted are refused. Consumer selection reuses the pure rules of
``dispatchers.py`` (active consumer for Exclusive/Failover, round robin over permits for
Shared, the key selector for Key_Shared, the slot read by the codec).
Message ids: a per-topic ledger id from the same counter as in-memory ledgers, entry ids
counting up, so ids are unique per topic and never negative (reference pitfall 17).
Must not know: sockets, storage.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Coroutine
from typing import Any

from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.dispatch.dispatchers import (
    Throttle,
    next_shared_consumer,
    pick_active_consumer,
)
from magnetar.broker.dispatch.key_shared import KeySharedMode, KeySharedSelector
from magnetar.broker.errors import ServerError
from magnetar.broker.ledger.position import Position
from magnetar.broker.naming import TopicName
from magnetar.broker.storage.memory import next_ledger_id
from magnetar.broker.topics.contract import (
    AppliedPolicies,
    LastMessageId,
    SubscriptionStats,
    TopicCounters,
    TopicSubscription,
)
from magnetar.broker.topics.producer import Admission, Deduplication, Producer, ProducerRegistry
from magnetar.broker.topics.publish import PendingSend, PublishSink
from magnetar.broker.topics.subscription import SubscriptionError
from magnetar.client.protocol import entry_slot

log = logging.getLogger(__name__)

_NOT_STORED = "-1:-1"
"""Mark-delete and read positions of a subscription that retains nothing."""


def _not_allowed(what: str) -> SubscriptionError:
    return SubscriptionError(ServerError.NotAllowedError, f"{what} on non-persistent topics")


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
        self.dropped = 0

    def __repr__(self) -> str:
        return f"<NonPersistentSubscription {self.topic_name} {self.name!r}>"

    @property
    def durable(self) -> bool:
        return False

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

    def deliver(self, message: OutMessage, count: int) -> None:
        """Send one published entry (as it goes out: nothing is stored, nothing redelivered)
        to this subscription's consumer, or drop it."""
        target: Consumer | None
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            target = self._active
        elif self.sub_type is SubType.KEY_SHARED and self._selector is not None:
            try:
                target = self._selector.select(entry_slot(message.data))
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
            target.sink.send_messages(target, [message])

    # nothing is retained: no acknowledgements, redelivery, backlog or dispatch rate
    async def ack_individual(
        self, consumer: Consumer, acks: list[tuple[Position, list[int] | None]]
    ) -> None:
        return None

    async def ack_positions(
        self,
        consumer: Consumer,
        whole: list[Position],
        partial: list[tuple[Position, list[int]]] | None = None,
    ) -> None:
        return None

    async def ack_cumulative(self, consumer: Consumer, position: Position) -> None:
        return None

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        return None

    async def settle_acks(self) -> None:
        return None

    def backlog(self) -> int:
        return 0

    @property
    def dispatch_throttle(self) -> Throttle | None:
        return None

    def set_dispatch_throttle(self, throttle: Throttle | None) -> None:
        """Nothing is dispatched from storage: no dispatch rate to limit."""

    async def reset_cursor(self, position: Position) -> list[Consumer]:
        raise _not_allowed("Seek is not supported")

    def statistics(self) -> SubscriptionStats:
        return SubscriptionStats(
            self.name,
            self.sub_type.name.title() if self.sub_type else "None",
            False,
            len(self._consumers),
            0,
            0,
            _NOT_STORED,
            _NOT_STORED,
        )

    def close(self) -> None:
        self._consumers.clear()


class NonPersistentTopic:
    def __init__(self, name: TopicName) -> None:
        self.name = name
        self.full_name = name.full
        self.producers = ProducerRegistry()
        self.dedup = Deduplication(False)
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.counters = TopicCounters()
        self._ledger_id = next_ledger_id()
        self._entry_ids = itertools.count()
        self._last: Position | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<NonPersistentTopic {self.name} subs={len(self.subscriptions)}>"

    # -- state
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def terminated(self) -> bool:
        return False  # only a persistent topic is terminated

    @property
    def storage_size(self) -> int:
        return 0

    def is_idle(self) -> bool:
        return not self.producers.producers and not any(
            sub.consumers for sub in self.subscriptions.values()
        )

    # -- producers and publishing
    def add_producer(self, producer: Producer) -> Admission:
        return self.producers.admit(producer)

    async def prepare_producer(self, producer: Producer) -> None:
        """Nothing to store before a producer is ready (no replication of non-persistent
        topics: ``replicate_subscription_state`` and replicators are persistent only)."""

    def remove_producer(self, producer: Producer) -> list[Producer]:
        return self.producers.remove(producer)

    async def persist_topic_epoch(self) -> None:
        """Nothing to persist: as Pulsar's, a non-persistent topic's epoch lives in memory."""

    def epoch_not_stored(self) -> None:
        """Never called: storing nothing cannot fail."""

    def last_sequence_id(self, producer_name: str) -> int:
        return -1

    def publish_message(  # noqa: PLR0917 - hot path, positional on purpose
        self,
        sink: PublishSink,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        num_msgs: int,
        data: bytes,
        check_dedup: bool = True,
    ) -> None:
        """Hand ``data`` to the consumers attached now (or drop it); ``sink`` hears at once."""
        pos = Position(self._ledger_id, next(self._entry_ids))
        self._last = pos
        self.counters.msg_in += num_msgs
        self.counters.bytes_in += len(data)
        self.counters.entries_in += 1
        message = OutMessage(pos, data)
        for sub in list(self.subscriptions.values()):
            sub.deliver(message, num_msgs)
        item = PendingSend(producer, data, num_msgs, sink, sequence_id, highest_sequence_id)
        sink.on_published([item], [pos])

    # -- subscriptions
    async def subscribe(
        self,
        consumer: Consumer,
        sub_name: str,
        *,
        durable: bool = True,
        initial_earliest: bool = False,
        start: Position | None = None,
        read_compacted: bool = False,
        replicated: bool = False,
    ) -> NonPersistentSubscription:
        if read_compacted:
            raise _not_allowed("readCompacted is not supported")
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

    async def create_subscription(self, sub_name: str, *, earliest: bool = True) -> None:
        return None  # nothing is retained: a subscription without consumers is meaningless

    def remove_consumer(self, sub: TopicSubscription, consumer: Consumer) -> None:
        sub.remove_consumer(consumer)
        if not sub.consumers and self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]

    async def unsubscribe(self, sub: TopicSubscription, consumer: Consumer | None) -> None:
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
        raise _not_allowed("Seek is not supported")

    async def resolve_last_message_id(self, sub: TopicSubscription | None) -> LastMessageId:
        last = self._last or Position(self._ledger_id, -1)
        return LastMessageId(last.ledger_id, last.entry_id, -1, None)

    # -- policies, statistics, life
    def apply_policies(self, policies: AppliedPolicies) -> Coroutine[Any, Any, None] | None:
        """Nothing here is stored or dispatched from storage: deduplication, unacked limits,
        delayed delivery and retention do not apply (rate limits are the manager's)."""
        return None

    async def delete_side_storage(self) -> None:
        """Nothing is stored."""

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
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

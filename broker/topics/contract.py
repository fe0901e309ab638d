"""The contract every kind of topic keeps: ``Topic`` and ``TopicSubscription``.

Owns: what the rest of the broker (the connection, the service's registry, policies, admin,
metrics, schemas, load balancing) may ask of a loaded topic whatever its kind — its name and
closed / terminated state, producers and publishing (``publish_message``: one SEND, its
outcome to a ``PublishSink``), subscribing and its subscriptions, the policies it applies
(``apply_policies`` with an ``AppliedPolicies``), whether it is idle, its statistics — and
the records those answers are made of (``LastMessageId``, ``TopicCounters``,
``SubscriptionStats``, ``AppliedPolicies``). ``PersistentTopic`` and ``NonPersistentTopic``
both implement it; nobody asks a topic what it is by probing its attributes. What only a
persistent topic has (its ledger, compaction, termination, seek by position) is reached by
narrowing to ``PersistentTopic``.
Invariants: a closed topic accepts nothing new (producers, consumers, publishes get an error
or are refused by the caller's check of ``closed``); ``terminated`` implies persistent.
Must not know: sockets, frames, HTTP, storage implementations.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from magnetar.broker.dispatch.consumer import Consumer, SubType
from magnetar.broker.dispatch.dispatchers import Throttle
from magnetar.broker.ledger.position import Position
from magnetar.broker.naming import TopicName
from magnetar.broker.offload import EffectiveOffloadPolicies
from magnetar.broker.topics.producer import Admission, Deduplication, Producer, ProducerRegistry
from magnetar.broker.topics.publish import PublishSink


@dataclass(frozen=True, slots=True)
class LastMessageId:
    ledger_id: int
    entry_id: int
    batch_index: int
    mark_delete: Position | None


@dataclass(slots=True)
class TopicCounters:
    msg_in: int = 0
    bytes_in: int = 0
    entries_in: int = 0
    publish_batches: int = 0
    extra: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    name: str
    type: str
    durable: bool
    consumers: int
    backlog: int
    unacked: int
    mark_delete: str
    read_position: str
    # Key_Shared (Pulsar 4 PIP-379 names); 0 for other types
    draining_hashes_count: int = 0
    draining_hashes_pending_messages: int = 0
    draining_hashes_cleared_total: int = 0


@dataclass(frozen=True, slots=True)
class AppliedPolicies:
    """What of the resolved namespace / topic policies a loaded topic applies itself (rate
    limits, quotas and expiry are the policy manager's)."""

    deduplication: bool
    max_unacked_per_consumer: int
    max_unacked_per_subscription: int
    delayed_delivery: bool
    retention_time_ms: int
    retention_size_bytes: int
    offload: EffectiveOffloadPolicies | None = None
    """Tiered storage's policies for the topic's ledgers (None: nothing is offloaded)."""


class TopicSubscription(Protocol):
    """A subscription of a loaded topic, whatever its kind."""

    @property
    def name(self) -> str: ...

    @property
    def durable(self) -> bool: ...

    @property
    def sub_type(self) -> SubType | None: ...

    @property
    def consumers(self) -> list[Consumer]: ...

    def remove_consumer(self, consumer: Consumer) -> None: ...

    def flow(self, consumer: Consumer, permits: int) -> None: ...

    async def ack_individual(
        self, consumer: Consumer, acks: list[tuple[Position, list[int] | None]]
    ) -> None: ...

    async def ack_positions(
        self,
        consumer: Consumer,
        whole: list[Position],
        partial: list[tuple[Position, list[int]]] | None = None,
    ) -> None: ...

    async def ack_cumulative(self, consumer: Consumer, position: Position) -> None: ...

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None: ...

    async def settle_acks(self) -> None:
        """Wait until every acknowledgement handed over is persisted (or failed)."""
        ...

    async def reset_cursor(self, position: Position) -> list[Consumer]:
        """Seek: disconnect the consumers (returned) and read from ``position`` next."""
        ...

    def backlog(self) -> int:
        """Entries not yet acknowledged (0 where nothing is retained)."""
        ...

    def set_dispatch_throttle(self, throttle: Throttle | None) -> None:
        """The dispatch rate limit of this subscription (None: unthrottled)."""
        ...

    @property
    def dispatch_throttle(self) -> Throttle | None: ...

    def statistics(self) -> SubscriptionStats: ...

    def close(self) -> None: ...


class Topic(Protocol):
    """A topic loaded on this broker, persistent or not."""

    @property
    def name(self) -> TopicName: ...

    @property
    def full_name(self) -> str: ...

    @property
    def producers(self) -> ProducerRegistry: ...

    @property
    def dedup(self) -> Deduplication: ...

    @property
    def counters(self) -> TopicCounters: ...

    @property
    def subscriptions(self) -> Mapping[str, TopicSubscription]: ...

    # -- state
    @property
    def closed(self) -> bool:
        """Closing or closed (unloaded): nothing new is accepted."""
        ...

    @property
    def terminated(self) -> bool:
        """No message will ever be added (only a persistent topic is ever terminated)."""
        ...

    @property
    def storage_size(self) -> int:
        """Bytes stored for the topic (0 where nothing is)."""
        ...

    def is_idle(self) -> bool:
        """No producers, no consumers and nothing stored (a first schema may be taken)."""
        ...

    # -- producers and publishing
    def add_producer(self, producer: Producer) -> Admission: ...

    async def prepare_producer(self, producer: Producer) -> None:
        """What the topic stores before an admitted producer is ready (a replication link's
        recovery point)."""
        ...

    def remove_producer(self, producer: Producer) -> list[Producer]:
        """Remove ``producer``; returns the waiting producers admitted in its place."""
        ...

    async def persist_topic_epoch(self) -> None: ...

    def epoch_not_stored(self) -> None: ...

    def last_sequence_id(self, producer_name: str) -> int: ...

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
        """Publish one SEND's entry; its outcome goes to ``sink`` (``PublishSink``)."""
        ...

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
    ) -> TopicSubscription:
        """``replicated``: the subscription's state is replicated to the topic's other
        clusters (``replicate_subscription_state``; persistent topics only)."""
        ...

    async def create_subscription(self, sub_name: str, *, earliest: bool = True) -> None: ...

    def remove_consumer(self, sub: TopicSubscription, consumer: Consumer) -> None: ...

    async def unsubscribe(self, sub: TopicSubscription, consumer: Consumer | None) -> None: ...

    async def delete_subscription(self, sub_name: str, *, force: bool) -> list[Consumer]: ...

    async def find_position_by_time(self, publish_time_ms: int) -> Position: ...

    async def resolve_last_message_id(self, sub: TopicSubscription | None) -> LastMessageId: ...

    # -- policies, statistics, life
    def apply_policies(self, policies: AppliedPolicies) -> Coroutine[Any, Any, None] | None:
        """Apply ``policies`` now; returns the I/O to carry out, if any (learning stored
        sequence ids when deduplication was switched on)."""
        ...

    def stats(self) -> dict[str, Any]:
        """Pulsar's ``TopicStats`` JSON of the topic."""
        ...

    async def delete_side_storage(self) -> None:
        """Before a deletion: drop what is stored beside the topic's ledger (delayed-delivery
        indexes, compacted views)."""
        ...

    async def close(self) -> None: ...


__all__ = [
    "AppliedPolicies",
    "LastMessageId",
    "SubscriptionStats",
    "Topic",
    "TopicCounters",
    "TopicSubscription",
]

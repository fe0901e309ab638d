"""A replication link between two in-memory topics, for the unit tiers.

Owns: ``LinkedRemote`` (a ``RemoteCluster`` whose producers publish into a real
``PersistentTopic`` of "the other cluster", through the receiving side's own path: a producer
named by the link, admitted and prepared by the topic, each entry a ``publish_message`` with
its source position as sequence id) and ``local_topic`` (a persistent topic on a memory
ledger, named and clustered as a broker would make it). With two of them, a topic's
replicators and replicated subscriptions run against another topic's real receiving code,
on virtual time. Must not know: the replicator's internals.
"""

from __future__ import annotations

import asyncio
import itertools

from magnetar.broker.ledger.position import Position
from magnetar.broker.naming import TopicName
from magnetar.broker.replication.contracts import ReplicationError
from magnetar.broker.replication.republish import Republished
from magnetar.broker.storage.memory import MemoryStorageFactory
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.producer import AccessMode, Producer
from magnetar.broker.topics.publish import PendingSend
from magnetar.client.protocol import pb

_ids = itertools.count(1)


async def local_topic(
    storage: MemoryStorageFactory, name: str, cluster: str, *, dedup: bool = False
) -> PersistentTopic:
    tn = TopicName.parse(name)
    topic = PersistentTopic(
        tn, await storage.open(tn.managed_ledger_name), dedup_enabled=dedup, local_cluster=cluster
    )
    await topic.load()
    return topic


class _Sink:
    """The outcome of one SEND."""

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.done = done

    def on_published(self, items: list[PendingSend], positions: list[Position | None]) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def on_publish_failed(self, items: list[PendingSend], exc: Exception) -> None:
        if not self.done.done():
            self.done.set_exception(ReplicationError(f"refused: {exc}"))
            self.done.add_done_callback(lambda f: f.exception())


class LinkedProducer:
    def __init__(self, topic: PersistentTopic, producer: Producer) -> None:
        self.topic = topic
        self.producer = producer
        self.closed = False
        self.sent = 0

    @property
    def connected(self) -> bool:
        return not self.closed and not self.topic.closed

    @property
    def address(self) -> str:
        return f"memory://{self.topic.full_name}"

    @property
    def last_error(self) -> str:
        return ""

    def send(self, entry: Republished) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.closed or self.topic.closed:
            fut.set_exception(ReplicationError("closed"))
            fut.add_done_callback(lambda f: f.exception())
            return fut
        self.sent += 1
        self.topic.publish_message(
            _Sink(fut),
            self.producer,
            entry.sequence_id,
            entry.sequence_id,
            entry.num_messages,
            entry.headers_and_payload,
        )
        return fut

    async def schema_version_for(self, schema: pb.Schema) -> bytes:
        return b""

    async def close(self) -> None:
        self.closed = True
        self.topic.remove_producer(self.producer)


class LinkedRemote:
    """The other cluster, as a replicator reaches it: ``topics`` by name, there."""

    def __init__(self, name: str, topics: dict[str, PersistentTopic]) -> None:
        self.name = name
        self.topics = topics
        self.producers: list[LinkedProducer] = []
        self.down = False

    async def create_producer(self, topic: str, producer_name: str) -> LinkedProducer:
        if self.down:
            raise ReplicationError(f"cluster {self.name} is down")
        target = self.topics[topic]
        producer = Producer(next(_ids), producer_name, AccessMode.SHARED)
        target.add_producer(producer)
        await target.prepare_producer(producer)
        linked = LinkedProducer(target, producer)
        self.producers.append(linked)
        return linked


__all__ = ["LinkedProducer", "LinkedRemote", "local_topic"]

"""Geo-replication inside topics, on memory storage and virtual time: the receiving side of a
link (deduplicated whatever the policy, recovered after a crash, a failed SEND never followed
by a later one), markers (stored, acknowledged, never read, not the last message), a topic's
replicators following its plan, and replicated subscriptions between two topics linked by
their real receiving code (``support.topic_link``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from support.autojump import AutojumpClock
from support.publish_sink import PublishOutcomes
from support.replication_fakes import FakeRemote, entry_bytes
from support.topic_link import LinkedRemote, local_topic
from support.waiting import wait_for

from magnetar.broker.ledger.errors import ManagedLedgerClosed
from magnetar.broker.ledger.position import Position
from magnetar.broker.policies.model import TopicPolicies
from magnetar.broker.replication.clusters import ReplicationPlan
from magnetar.broker.replication.contracts import RemoteCluster
from magnetar.broker.replication.topic_replication import ReplicationSettings, TopicReplication
from magnetar.broker.storage.contract import AddedCallback
from magnetar.broker.storage.memory import MemoryLedger, MemoryStorageFactory
from magnetar.broker.topics.inbound_links import INBOUND_SNAPSHOTS, SNAPSHOT_PROPERTY
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.producer import AccessMode, Producer
from magnetar.broker.topics.replication_positions import SOURCE_POSITION_PROPERTY
from magnetar.client.protocol import markers
from magnetar.clock import Clock

TOPIC = "persistent://geo/ns/orders"
LINK = "pulsar.repl.east-->west"


def _replicated(source_entry: int) -> bytes:
    """The entry east's replicator sends for its entry 1:``source_entry``."""
    return entry_bytes(
        f"m{source_entry}".encode(),
        replicated_from="east",
        properties={SOURCE_POSITION_PROPERTY: f"1:{source_entry}"},
    )


def _seq(source_entry: int) -> int:
    return 1 << 32 | source_entry


def _send(topic: PersistentTopic, sink: PublishOutcomes, producer: Producer, entry: int) -> None:
    topic.publish_message(sink, producer, _seq(entry), _seq(entry), 1, _replicated(entry))


async def _link_producer(topic: PersistentTopic) -> Producer:
    producer = Producer(1, LINK, AccessMode.SHARED)
    topic.add_producer(producer)
    await topic.prepare_producer(producer)
    assert producer.link == LINK
    return producer


async def _settled(topic: PersistentTopic, sink: PublishOutcomes, n: int) -> None:
    await wait_for(lambda: len(sink.got) >= n, 5, f"{n} outcomes")


async def test_a_link_is_deduplicated_whatever_the_policy() -> None:
    storage = MemoryStorageFactory()
    topic = await local_topic(storage, TOPIC, "west", dedup=False)
    producer = await _link_producer(topic)
    sink = PublishOutcomes()
    for entry in (0, 1, 1, 0, 2):
        _send(topic, sink, producer, entry)
    await _settled(topic, sink, 5)
    assert [isinstance(g, Position) for g in sink.got] == [True, True, False, False, True]
    assert topic.ledger.num_entries == 3
    assert topic.last_sequence_id(LINK) == _seq(2)  # PRODUCER_SUCCESS tells the sender


async def test_a_crashed_owner_s_successor_recognises_what_the_link_stored() -> None:
    storage = MemoryStorageFactory()
    topic = await local_topic(storage, TOPIC, "west")
    producer = await _link_producer(topic)  # its recovery point stored first
    assert INBOUND_SNAPSHOTS.decode(topic.ledger.properties[SNAPSHOT_PROPERTY]) is not None
    sink = PublishOutcomes()
    for entry in range(5):
        _send(topic, sink, producer, entry)
    await _settled(topic, sink, 5)
    # no close: the next owner opens the same ledger (a SIGKILLed broker)
    successor = await local_topic(storage, TOPIC, "west")
    assert successor.last_sequence_id(LINK) == _seq(4)
    again = await _link_producer(successor)
    sink2 = PublishOutcomes()
    for entry in range(3, 7):
        _send(successor, sink2, again, entry)
    await _settled(successor, sink2, 4)
    assert [isinstance(g, Position) for g in sink2.got] == [False, False, True, True]
    assert successor.ledger.num_entries == 7


async def test_a_clean_close_leaves_nothing_to_read_again() -> None:
    storage = MemoryStorageFactory()
    topic = await local_topic(storage, TOPIC, "west")
    producer = await _link_producer(topic)
    sink = PublishOutcomes()
    _send(topic, sink, producer, 9)
    await _settled(topic, sink, 1)
    await topic.close()
    snap = INBOUND_SNAPSHOTS.decode(topic.ledger.properties[SNAPSHOT_PROPERTY])
    assert snap is not None and snap.ids == {LINK: _seq(9)}
    assert snap.position == topic.ledger.last_confirmed


class _RefusingOnce(MemoryLedger):
    """Refuses one append at submission (as a managed ledger with too many pending adds)."""

    refuse_next = False

    def add_entries_then(self, datas: list[bytes], then: AddedCallback) -> None:
        if self.refuse_next:
            self.refuse_next = False
            raise ManagedLedgerClosed("too many pending adds")
        super().add_entries_then(datas, then)


async def test_nothing_a_link_sends_after_a_failed_send_is_stored_before_it() -> None:
    ledger = _RefusingOnce("geo/ns/persistent/orders", 1)
    from magnetar.broker.naming import TopicName

    topic = PersistentTopic(TopicName.parse(TOPIC), ledger, local_cluster="west")
    await topic.load()
    producer = await _link_producer(topic)
    sink = PublishOutcomes()
    _send(topic, sink, producer, 1)
    await _settled(topic, sink, 1)
    ledger.refuse_next = True
    _send(topic, sink, producer, 2)
    await asyncio.sleep(0)  # the refused batch goes; the next SEND is another batch
    _send(topic, sink, producer, 3)
    await _settled(topic, sink, 3)
    assert isinstance(sink.got[1], Exception) and isinstance(sink.got[2], Exception)
    assert ledger.num_entries == 1  # 3 was not stored without 2
    assert producer.closed and LINK not in topic.producers.producers  # closed by the topic
    again = await _link_producer(topic)  # the replicator reconnects and sends from 2 again
    for entry in (2, 3):
        _send(topic, sink, again, entry)
    await _settled(topic, sink, 5)
    assert ledger.num_entries == 3


async def test_markers_are_stored_acknowledged_and_never_read() -> None:
    storage = MemoryStorageFactory()
    topic = await local_topic(storage, TOPIC, "east")
    await topic.create_subscription("idle", earliest=True)
    producer = Producer(7, "app", AccessMode.SHARED)
    topic.add_producer(producer)
    sink = PublishOutcomes()
    topic.publish_message(sink, producer, 0, 0, 1, entry_bytes(b"one"))
    await _settled(topic, sink, 1)
    await topic.markers.expect()
    marker_at = await topic.publish_marker(markers.snapshot_request("s", "east", publish_time_ms=1))
    sub = topic.subscriptions["idle"]
    await sub.settle_acks()
    assert sub.backlog() == 1  # the message, not the marker
    assert sub.cursor.is_acked(marker_at)
    # a reader from the start gets the message only, and is told it is the last
    reader = topic.ledger.new_non_durable_cursor("reader", Position(-1, -1))
    from magnetar.broker.topics.markers import MarkerSkippingCursor

    entries = await MarkerSkippingCursor(reader, topic.markers.active).read_entries(10)
    assert [e.position for e in entries] == [Position(marker_at.ledger_id, 0)]
    assert topic.last_message_id(None).entry_id == 0  # not the marker after it
    # a new owner finds the last message behind the markers too
    successor = await local_topic(storage, TOPIC, "east")
    assert successor.markers.possible and successor.last_message_id(None).entry_id == 0


def _policies(*clusters: str, ttl_s: int = 0) -> TopicPolicies:
    return TopicPolicies(message_ttl_s=ttl_s, replication_clusters=tuple(clusters))


def _plan(*clusters: str) -> ReplicationPlan:
    return ReplicationPlan(frozenset(clusters), "east")


async def _replication(
    topic: PersistentTopic, remotes: dict[str, RemoteCluster], clock: Clock
) -> TopicReplication:
    async def no_schema(version: bytes) -> None:
        return None

    lookup: Callable[[str], RemoteCluster] = remotes.__getitem__
    return TopicReplication(topic, "east", lookup, no_schema, clock, ReplicationSettings())


async def test_replicators_follow_the_plan() -> None:
    async with AutojumpClock() as clock:
        storage = MemoryStorageFactory()
        topic = await local_topic(storage, TOPIC, "east")
        producer = Producer(7, "app", AccessMode.SHARED)
        topic.add_producer(producer)
        sink = PublishOutcomes()
        topic.publish_message(sink, producer, 0, 0, 1, entry_bytes(b"before"))
        await _settled(topic, sink, 1)
        west = FakeRemote("west")
        tr = await _replication(topic, {"west": west}, clock)
        await tr.apply(_plan("east", "west"), _policies("east", "west"))
        assert "pulsar.repl.west" in topic.ledger.cursor_names()
        assert topic.markers.possible  # readers filter markers from now on
        topic.publish_message(sink, producer, 1, 1, 1, entry_bytes(b"after"))
        await wait_for(lambda: len(west.stored) == 1, 5, "the new message replicated")
        assert west.stored[0].source.entry_id == 1  # made at the end: "before" is not sent
        assert "pulsar.repl.west" not in topic.subscriptions  # not a user's subscription
        await tr.apply(_plan("east"), _policies("east"))  # west removed
        assert "pulsar.repl.west" not in topic.ledger.cursor_names()  # backlog released
        assert not tr.replicators and tr.subscriptions is None
        await tr.detach()


async def test_a_stale_replicator_cursor_is_deleted_on_load() -> None:
    async with AutojumpClock() as clock:
        storage = MemoryStorageFactory()
        topic = await local_topic(storage, TOPIC, "east")
        await topic.ledger.open_cursor("pulsar.repl.gone", initial_earliest=True)
        tr = await _replication(topic, {}, clock)
        await tr.apply(_plan("east"), _policies("east"))
        assert "pulsar.repl.gone" not in topic.ledger.cursor_names()


@pytest.mark.parametrize("acked", [50, 100])
async def test_replicated_subscriptions_between_two_linked_topics(acked: int) -> None:
    """East and west, each a topic replicating to the other through the other's receiving
    code: acknowledgements in east move the same subscription in west, to a snapshot at or
    before what east acknowledged (never past it)."""
    async with AutojumpClock() as clock:
        east_topics: dict[str, PersistentTopic] = {}
        west_topics: dict[str, PersistentTopic] = {}
        east = await local_topic(MemoryStorageFactory(), TOPIC, "east")
        west = await local_topic(MemoryStorageFactory(), TOPIC, "west")
        east_topics[TOPIC], west_topics[TOPIC] = east, west
        for topic in (east, west):
            await topic.create_subscription("s", earliest=True)
            await topic.replicate_subscription(topic.subscriptions["s"])
        east_rep = await _replication(east, {"west": LinkedRemote("west", west_topics)}, clock)
        west_rep = TopicReplication(
            west,
            "west",
            {"east": LinkedRemote("east", east_topics)}.__getitem__,
            east_rep._schema_of,
            clock,
            ReplicationSettings(),
        )
        await east_rep.apply(_plan("east", "west"), _policies("east", "west"))
        await west_rep.apply(
            ReplicationPlan(frozenset({"east", "west"}), "west"), _policies("east", "west")
        )
        producer = Producer(7, "app", AccessMode.SHARED)
        east.add_producer(producer)
        sink = PublishOutcomes()
        for i in range(100):
            east.publish_message(sink, producer, i, i, 1, entry_bytes(f"m{i}".encode()))
            if i % 10 == 9:
                await clock.sleep(1.0)  # messages keep coming while snapshots are taken
        await _settled(east, sink, 100)
        await wait_for(  # replicated, nothing acked yet: markers do not count
            lambda: west.subscriptions["s"].backlog() == 100, 30, "the 100 messages in west"
        )
        last_acked = sink.got[acked - 1]
        assert isinstance(last_acked, Position)
        await east.subscriptions["s"].skip_to(last_acked)  # east's consumers acked these
        moved = await wait_for(
            lambda: west.subscriptions["s"].backlog() < 100 and west.subscriptions["s"],
            30,
            "west's subscription moved by east's acknowledgements",
        )
        west_left = moved.backlog()
        assert 100 - acked <= west_left < 100 - acked + 20  # never past, at most a snapshot short
        stats = east_rep.subscriptions.statistics() if east_rep.subscriptions else {}
        assert stats["snapshotsCompleted"] >= 1 and stats["updatesSent"] >= 1
        await wait_for(  # markers never count (once a marker being stored is reported)
            lambda: east.subscriptions["s"].backlog() == 100 - acked, 30, "east's backlog"
        )
        await east_rep.detach()
        await west_rep.detach()


async def test_a_topic_with_a_replication_backlog_is_kept() -> None:
    """The broker's geo-replication says a topic must not be deleted as inactive while one
    of its replicators has a backlog (here: the remote is not registered, so nothing can go
    there; the reason is shown)."""
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.errors import ResourceNotFound
    from magnetar.broker.namespace.cluster_data import ClusterData
    from magnetar.broker.replication.geo import GeoReplication
    from magnetar.zk.embedded import MemoryMetadataServer

    class NoClusters:
        async def cluster_data(self, cluster: str) -> ClusterData:
            raise ResourceNotFound("Cluster does not exist")

        async def get_partitions(self, tenant: str, namespace: str, domain: str, local: str) -> int:
            return 0

    async with AutojumpClock() as clock:
        store = MemoryMetadataServer().connect()
        geo = GeoReplication(
            BrokerConfig(cluster_name="east"),
            NoClusters(),
            None,
            store,
            clock,  # type: ignore[arg-type]
        )
        geo.start()
        topic = await local_topic(MemoryStorageFactory(), TOPIC, "east")
        await geo.attach(topic, _policies("east", "west"))
        assert not geo.keeps(topic)
        producer = Producer(7, "app", AccessMode.SHARED)
        topic.add_producer(producer)
        sink = PublishOutcomes()
        topic.publish_message(sink, producer, 0, 0, 1, entry_bytes(b"for west"))
        await _settled(topic, sink, 1)
        shown = await wait_for(
            lambda: (s := geo.topic_stats(topic)["replication"]["west"])["lastError"] and s,
            30,
            "the reason shown",
        )
        assert "not registered" in shown["lastError"] and shown["replicationBacklog"] == 1
        assert geo.keeps(topic)
        await topic.close()  # detaches its replication
        assert TOPIC not in geo.topics
        await geo.close()


async def test_a_compacted_view_never_holds_a_marker() -> None:
    """Even keeping keyless messages (``topicCompactionRetainNullKey``), compaction leaves
    markers out: a compacted reader never gets one."""
    from magnetar.broker.compaction import TopicCompaction

    storage = MemoryStorageFactory()
    topic = await local_topic(storage, TOPIC, "east")
    topic.compaction = TopicCompaction(
        storage, topic.name.managed_ledger_name, retain_null_key=True
    )
    await topic.compaction.load()
    await topic.markers.expect()
    keyless = await topic.ledger.add_entries([entry_bytes(b"keyless")])
    await topic.publish_marker(markers.snapshot_request("s", "east", publish_time_ms=1))
    await topic.compaction.compact(topic)
    view = topic.compaction.view
    assert view is not None
    assert [view.originals[i] for i in range(len(view))] == keyless

"""Delayed delivery survives a broker restart on real storage (ZooKeeper metadata, a real
bookie process): messages published with ``deliver_after`` due after the restart are held by
the persisted ``DelayedDeliveryIndex`` (sealed and snapshotted when the first broker closes
the topic), and the new broker delivers every one of them, none before its due time, none
twice, the not-delayed ones at once.
"""

from __future__ import annotations

import datetime
import time
import uuid

import pulsar
from support.bookies import BookieFactory
from support.broker import InProcessBroker
from support.waiting import wait_until
from support.zookeeper import ZooKeeperServer

from magnetar.broker.admin.topic_ops import TopicOperations
from magnetar.broker.delayed import delayed_index_ledger_name
from magnetar.zk import paths

ML = {"ensemble_size": 1, "write_quorum": 1, "ack_quorum": 1}
Shared = pulsar.ConsumerType.Shared


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_delayed_messages_due_after_restart_arrive_then_none_early_none_lost(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory
) -> None:
    url = f"{zookeeper_server.url}/broker-{uuid.uuid4().hex[:10]}"
    bookie_factory.start_many(1, metadata=url)
    topic = f"persistent://public/default/delayed-{uuid.uuid4().hex[:6]}"
    due_at: dict[bytes, int] = {}
    broker = InProcessBroker(metadata_url=url, managed_ledger=ML).start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            name = f"d{i}".encode()
            delay_ms = 4000 + 150 * i
            due_at[name] = _now_ms() + delay_ms
            producer.send(name, deliver_after=datetime.timedelta(milliseconds=delay_ms))
        producer.send(b"now")
        first = consumer.receive(10_000)
        assert first.data() == b"now"  # the delayed ones are held
        consumer.acknowledge(first)
        assert broker.service is not None
        sub = broker.service.topics[topic].subscriptions["sub"]
        assert sub.delayed_index is not None and sub.delayed_index.size() == 20
        consumer.close()
    finally:
        client.close()
        broker.stop()
    assert _now_ms() < min(due_at.values()), "the first broker outlived the delays: too slow"

    broker = InProcessBroker(metadata_url=url, managed_ledger=ML).start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=Shared)
        assert broker.service is not None
        sub = broker.service.topics[topic].subscriptions["sub"]
        assert sub.delayed_index is not None
        stats = sub.delayed_index.statistics()
        # recovered from storage (sealed runs + snapshot), not rebuilt by re-reading the topic
        assert stats.runs >= 1 and stats.pending == 20 and stats.added == 0, stats
        got: dict[bytes, int] = {}
        for _ in range(20):
            m = consumer.receive(30_000)
            assert m.data() not in got, m.data()  # not twice
            got[m.data()] = _now_ms()
            consumer.acknowledge(m)
        assert set(got) == set(due_at)  # none lost, and "now" (acked) not again
        for name, at in due_at.items():
            assert got[name] >= at, (name, got[name] - at)  # none early
        assert sub.delayed_index.size() == 0
        # unsubscribe deletes the index (its ledger sits under the cursor node) first
        factory = broker.service.storage.factory  # type: ignore[attr-defined]
        node = paths.managed_ledger(delayed_index_ledger_name(sub.delayed_ledger.name, "sub"))
        assert broker.call(lambda: factory.store.exists(node)) is not None
        consumer.unsubscribe()
        assert broker.call(lambda: factory.store.exists(node)) is None
        assert "sub" not in broker.service.topics[topic].subscriptions
    finally:
        client.close()
        broker.stop()


def test_deleting_an_unloaded_topic_deletes_its_delayed_indexes(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory
) -> None:
    url = f"{zookeeper_server.url}/broker-{uuid.uuid4().hex[:10]}"
    bookie_factory.start_many(1, metadata=url)
    topic = f"persistent://public/default/delayed-del-{uuid.uuid4().hex[:6]}"
    broker = InProcessBroker(metadata_url=url, managed_ledger=ML).start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        client.subscribe(topic, "sub", consumer_type=Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(f"later-{i}".encode(), deliver_after=datetime.timedelta(hours=1))
        assert broker.service is not None
        service = broker.service
        wait_until(
            lambda: (
                broker.call(lambda: TopicOperations(service).topic_stats(topic))["subscriptions"][
                    "sub"
                ]["msgDelayed"]
                == 3
            ),
            30,
            "the delayed messages in the index",
        )
        sub = service.topics[topic].subscriptions["sub"]
        node = paths.managed_ledger(delayed_index_ledger_name(sub.delayed_ledger.name, "sub"))
    finally:
        client.close()
        broker.stop()

    broker = InProcessBroker(metadata_url=url, managed_ledger=ML).start()
    try:
        assert broker.service is not None
        service = broker.service
        factory = service.storage.factory  # type: ignore[attr-defined]
        assert topic not in service.topics
        assert broker.call(lambda: factory.store.exists(node)) is not None
        broker.call(lambda: service.delete_topic(topic, force=True))
        assert broker.call(lambda: factory.store.exists(node)) is None
        assert topic not in service.topics
    finally:
        broker.stop()

"""The broker on real storage: ZooKeeper metadata, a real bookie process, managed ledgers and
cursors. The official client produces and consumes; a broker restart on the same metadata and
bookie keeps every published message and the subscription's acknowledgements."""

from __future__ import annotations

import uuid

import pulsar
from support.bookies import BookieFactory
from support.broker import InProcessBroker
from support.waiting import wait_until
from support.zookeeper import ZooKeeperServer

ML = {"ensemble_size": 1, "write_quorum": 1, "ack_quorum": 1}


def test_publish_consume_and_restart_keeps_acks(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory
) -> None:
    url = f"{zookeeper_server.url}/broker-{uuid.uuid4().hex[:10]}"
    bookie_factory.start_many(1, metadata=url)
    topic = "persistent://public/default/durable"
    broker = InProcessBroker(metadata_url=url, managed_ledger=ML).start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=True)
        for i in range(200):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        single = client.create_producer(topic)
        for i in range(200, 210):
            single.send(f"m{i}".encode())
        got = [consumer.receive(10_000) for _ in range(210)]
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(210)]
        for m in got[:205]:
            consumer.acknowledge(m)
        consumer.close()  # flushes the acks before closing
    finally:
        client.close()
        broker.stop()

    broker = InProcessBroker(metadata_url=url, managed_ledger=ML).start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        rest = sorted(consumer.receive(10_000).data() for _ in range(5))
        assert rest == sorted(f"m{i}".encode() for i in range(205, 210))
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert reader.read_next(10_000).data() == b"m0"
        with_more = client.create_producer(topic)
        with_more.send(b"after-restart")
        assert consumer.receive(10_000).data() == b"after-restart"
    finally:
        client.close()
        broker.stop()


def test_batch_index_acks_and_redelivery_counts_survive_restart(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory
) -> None:
    url = f"{zookeeper_server.url}/broker-{uuid.uuid4().hex[:10]}"
    bookie_factory.start_many(1, metadata=url)
    batched = "persistent://public/default/batched"
    nacked = "persistent://public/default/nacked"
    broker = InProcessBroker(metadata_url=url, managed_ledger=ML).start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    shared = pulsar.ConsumerType.Shared
    try:
        consumer = client.subscribe(
            batched, "s", consumer_type=shared, batch_index_ack_enabled=True
        )
        producer = client.create_producer(batched, batching_enabled=True, batching_max_messages=10)
        for i in range(10):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        got = [consumer.receive(10_000) for _ in range(10)]
        for m in got[::2]:
            consumer.acknowledge(m)
        consumer.close()
        retry = client.subscribe(
            nacked, "s", consumer_type=shared, negative_ack_redelivery_delay_ms=100
        )
        client.create_producer(nacked).send(b"x")
        for expected in (0, 1, 2):
            m = retry.receive(10_000)
            assert m.redelivery_count() == expected
            if expected < 2:
                retry.negative_acknowledge(m)
        retry.close()
    finally:
        client.close()
        broker.stop()

    broker = InProcessBroker(metadata_url=url, managed_ledger=ML).start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(
            batched, "s", consumer_type=shared, batch_index_ack_enabled=True
        )
        again = sorted(consumer.receive(10_000).data() for _ in range(5))
        assert again == sorted(f"m{i}".encode() for i in range(1, 10, 2))
        retry = client.subscribe(nacked, "s", consumer_type=shared)
        assert retry.receive(10_000).redelivery_count() == 2  # durable, unlike Pulsar
    finally:
        client.close()
        broker.stop()


def test_a_subscription_whose_reads_fail_resumes_when_its_bookie_returns(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory
) -> None:
    """The bookie holding a backlog is SIGKILLed; a consumer subscribes meanwhile and its
    reads fail. Once the bookie is back the consumer gets the whole backlog in order, with
    nothing else happening (no publish, no flow, no ack): the dispatcher retries its read on
    its own back-off instead of stalling until something wakes it."""
    url = f"{zookeeper_server.url}/broker-{uuid.uuid4().hex[:10]}"
    (bookie,) = bookie_factory.start_many(1, metadata=url)
    topic = "persistent://public/default/read-retry"
    no_cache = {**ML, "entry_cache_bytes": 0}
    broker = InProcessBroker(metadata_url=url, managed_ledger=no_cache).start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        client.subscribe(topic, "sub").close()  # the subscription holds the backlog
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(50):
            producer.send(f"m{i}".encode())
        bookie.kill()
        consumer = client.subscribe(topic, "sub", receiver_queue_size=10)

        def failures() -> int:
            sub = broker.service.topics[topic].subscriptions["sub"]  # type: ignore[union-attr]
            d = sub.dispatcher
            return 0 if d is None else d.read_failures

        wait_until(failures, 60, "a dispatch read failed")
        bookie.start()
        got = [consumer.receive(30_000).data() for _ in range(50)]
        assert got == [f"m{i}".encode() for i in range(50)]
    finally:
        client.close()
        broker.stop()

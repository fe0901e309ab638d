"""The official Apache Pulsar Python client (pulsar-client 3.13, C++ 4.2) against our broker.

Each test starts a fresh in-process ``BrokerService`` (in-memory metadata and storage) on a
free port and talks to it only through ``import pulsar``, unchanged.
"""

from __future__ import annotations

import time
import uuid

import pulsar
import pytest
from support.broker import InProcessBroker
from support.metrics import sample
from support.waiting import wait_until

from magnetar.broker.admin.metrics import BrokerMetrics
from magnetar.broker.admin.topic_ops import TopicOperations

Shared = pulsar.ConsumerType.Shared
Failover = pulsar.ConsumerType.Failover
Exclusive = pulsar.ConsumerType.Exclusive
Earliest = pulsar.InitialPosition.Earliest


def _topic(prefix: str = "t") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def _drain(consumer: pulsar.Consumer, n: int, timeout_ms: int = 5000) -> list[pulsar.Message]:
    return [consumer.receive(timeout_ms) for _ in range(n)]


def _nothing_more(consumer: pulsar.Consumer, timeout_ms: int = 300) -> bool:
    try:
        consumer.receive(timeout_ms)
    except pulsar.Timeout:
        return True
    return False


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
@pytest.mark.parametrize("sub_type", [Exclusive, Shared, Failover], ids=lambda t: t.name)
def test_produce_consume_each_subscription_type(
    client: pulsar.Client, sub_type: pulsar.ConsumerType, batching: bool
) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub", consumer_type=sub_type)
    producer = client.create_producer(topic, batching_enabled=batching)
    for i in range(50):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    got = _drain(consumer, 50)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(50)]
    for m in got:
        consumer.acknowledge(m)
    assert _nothing_more(consumer)


def test_second_exclusive_consumer_is_refused(client: pulsar.Client) -> None:
    topic = _topic()
    client.subscribe(topic, "sub", consumer_type=Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=Exclusive)


def test_exclusive_producer_access_mode(client: pulsar.Client) -> None:
    topic = _topic()
    client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)


def test_chunked_10mb_message(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    payload = bytes(range(256)) * (10 * 1024 * 1024 // 256)
    producer.send(payload)
    msg = consumer.receive(15000)
    assert msg.data() == payload
    consumer.acknowledge(msg)


def test_unacked_messages_come_back_after_reconnect(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub", consumer_type=Shared)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    got = _drain(consumer, 10)
    for m in got:
        if int(m.data()[1:]) % 2 == 0:
            consumer.acknowledge(m)
    consumer.close()
    consumer = client.subscribe(topic, "sub", consumer_type=Shared)
    again = sorted(m.data() for m in _drain(consumer, 5))
    assert again == sorted(f"m{i}".encode() for i in range(1, 10, 2))
    assert _nothing_more(consumer)


def test_cumulative_ack(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub", consumer_type=Exclusive)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    got = _drain(consumer, 10)
    consumer.acknowledge_cumulative(got[5])
    consumer.close()
    consumer = client.subscribe(topic, "sub", consumer_type=Exclusive)
    assert [m.data() for m in _drain(consumer, 4)] == [f"m{i}".encode() for i in range(6, 10)]
    assert _nothing_more(consumer)


def test_negative_ack_redelivers_with_increasing_count_then_dlq(client: pulsar.Client) -> None:
    topic = _topic()
    dlq_topic = f"{topic}-sub-DLQ"
    dlq = client.subscribe(dlq_topic, "dlq-reader", initial_position=Earliest)
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2),
    )
    producer = client.create_producer(topic)
    producer.send(b"poison")
    counts = []
    for _ in range(3):
        msg = consumer.receive(5000)
        assert msg.data() == b"poison"
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2]
    dead = dlq.receive(5000)
    assert dead.data() == b"poison"
    assert _nothing_more(consumer, 500)


def test_ack_timeout_redelivers(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(
        topic, "sub", consumer_type=Shared, unacked_messages_timeout_ms=10_000
    )
    producer = client.create_producer(topic)
    producer.send(b"late")
    first = consumer.receive(5000)
    assert first.redelivery_count() == 0
    again = consumer.receive(15_000)
    assert again.data() == b"late"
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)


def test_readers_earliest_latest_and_message_id(client: pulsar.Client) -> None:
    topic = _topic()
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(5)] == [f"m{i}".encode() for i in range(5)]
    assert not reader.has_message_available()
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    from_id = client.create_reader(topic, ids[2])
    producer.send(b"m5")
    assert latest.read_next(5000).data() == b"m5"
    assert [from_id.read_next(5000).data() for _ in range(3)] == [b"m3", b"m4", b"m5"]
    inclusive = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert inclusive.read_next(5000).data() == b"m2"


def test_seek_by_time_and_by_id(client: pulsar.Client) -> None:
    topic = _topic()
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub", consumer_type=Exclusive)
    for i in range(3):
        producer.send(f"old{i}".encode())
    old = _drain(consumer, 3)
    cut = old[-1].publish_timestamp() + 1
    # the next publish time (the client's wall clock) must be >= cut
    wait_until(lambda: time.time() * 1000 >= cut, 5, "the wall clock past cut", interval_s=0.001)
    for i in range(3):
        producer.send(f"new{i}".encode())
    got = old + _drain(consumer, 3)
    for m in got:
        consumer.acknowledge(m)
    consumer.seek(cut)
    assert [m.data() for m in _drain(consumer, 3)] == [b"new0", b"new1", b"new2"]
    consumer.seek(pulsar.MessageId.earliest)
    assert consumer.receive(5000).data() == b"old0"


def test_partitioned_topic_key_routing(broker: InProcessBroker, client: pulsar.Client) -> None:
    topic = _topic("part")
    local = topic.rsplit("/", 1)[1]
    assert broker.service is not None
    resources = broker.service.resources
    broker.call(lambda: resources.create_partitioned("public", "default", "persistent", local, 4))
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(4)]
    consumer = client.subscribe(topic, "sub", consumer_type=Shared)
    producer = client.create_producer(topic)
    keys = [f"k{i}" for i in range(8)]
    for round_ in range(5):
        for k in keys:
            producer.send(f"{k}:{round_}".encode(), partition_key=k)
    got = _drain(consumer, 40)
    partition_of: dict[str, set[str]] = {}
    for m in got:
        partition_of.setdefault(m.partition_key(), set()).add(m.topic_name())
        consumer.acknowledge(m)
    assert sorted(partition_of) == keys
    assert all(len(parts) == 1 for parts in partition_of.values())
    assert len({p for parts in partition_of.values() for p in parts}) > 1
    assert sorted(m.data() for m in got) == sorted(
        f"{k}:{r}".encode() for k in keys for r in range(5)
    )


def test_failover_switches_to_next_consumer_without_loss(client: pulsar.Client) -> None:
    topic = _topic()
    first = client.subscribe(topic, "sub", consumer_type=Failover, consumer_name="a")
    second = client.subscribe(topic, "sub", consumer_type=Failover, consumer_name="b")
    producer = client.create_producer(topic)
    for i in range(20):
        producer.send(f"m{i}".encode())
    got = _drain(first, 20)
    assert _nothing_more(second, 200)
    for m in got[:10]:
        first.acknowledge(m)
    first.close()
    rest = _drain(second, 10)
    assert [m.data() for m in rest] == [f"m{i}".encode() for i in range(10, 20)]


def test_broker_deduplication() -> None:
    b = InProcessBroker(broker_deduplication_enabled=True).start()
    c = pulsar.Client(b.service_url, operation_timeout_seconds=5)
    try:
        topic = _topic()
        consumer = c.subscribe(topic, "sub")
        producer = c.create_producer(topic, producer_name="p1")
        for seq in (0, 1, 1, 2, 0, 3):
            producer.send(f"s{seq}".encode(), sequence_id=seq)
        got = _drain(consumer, 4)
        assert [m.data() for m in got] == [b"s0", b"s1", b"s2", b"s3"]
        assert _nothing_more(consumer)
        producer.close()
        producer = c.create_producer(topic, producer_name="p1")
        assert producer.last_sequence_id() == 3
    finally:
        c.close()
        b.stop()


def test_unsubscribe_deletes_the_subscription(
    broker: InProcessBroker, client: pulsar.Client
) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "gone", initial_position=Earliest)
    producer = client.create_producer(topic)
    producer.send(b"before")
    assert consumer.receive(5000).data() == b"before"
    assert broker.service is not None
    service = broker.service
    assert broker.call(lambda: TopicOperations(service).list_subscriptions(topic)) == ["gone"]
    consumer.unsubscribe()
    assert broker.call(lambda: TopicOperations(service).list_subscriptions(topic)) == []
    producer.send(b"after")
    again = client.subscribe(topic, "gone")  # Latest: a new subscription starts at the end
    assert _nothing_more(again)


def test_reader_seek_and_last_message_id(client: pulsar.Client) -> None:
    topic = _topic()
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=5)
    for i in range(10):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(5000) for _ in range(10)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    assert not reader.has_message_available()
    reader.seek(pulsar.MessageId.earliest)
    assert reader.read_next(5000).data() == b"m0"
    assert reader.has_message_available()


@pytest.mark.parametrize("sub_type", [Exclusive, Failover], ids=lambda t: t.name)
def test_negative_ack_on_single_active_rewinds_with_count_zero(
    client: pulsar.Client, sub_type: pulsar.ConsumerType
) -> None:
    topic = _topic()
    consumer = client.subscribe(
        topic, "sub", consumer_type=sub_type, negative_ack_redelivery_delay_ms=100
    )
    producer = client.create_producer(topic)
    producer.send(b"a")
    producer.send(b"b")
    first = consumer.receive(5000)
    consumer.acknowledge(first)
    second = consumer.receive(5000)
    consumer.negative_acknowledge(second)
    again = consumer.receive(5000)
    assert again.data() == b"b" and again.redelivery_count() == 0
    consumer.acknowledge(again)


def test_wait_for_exclusive_producer_gets_the_topic_when_it_is_free(
    broker: InProcessBroker, client: pulsar.Client
) -> None:
    import threading

    topic = _topic()
    consumer = client.subscribe(topic, "sub")
    holder = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    made: list[pulsar.Producer] = []
    waiter = threading.Thread(
        target=lambda: made.append(
            client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive)
        )
    )
    waiter.start()
    assert broker.service is not None
    topics = broker.service.topics
    # queued behind the exclusive holder
    wait_until(lambda: topics[topic].producers.waiting, 30, "the waiting producer queued")
    assert not made
    holder.send(b"from-holder")
    holder.close()
    waiter.join(10)
    assert made
    made[0].send(b"from-waiter")
    assert [consumer.receive(5000).data() for _ in range(2)] == [b"from-holder", b"from-waiter"]


def test_partitioned_auto_creation() -> None:
    b = InProcessBroker(allow_auto_topic_creation_type="partitioned", default_num_partitions=3)
    b.start()
    c = pulsar.Client(b.service_url, operation_timeout_seconds=5)
    try:
        topic = _topic("auto")
        assert len(c.get_topic_partitions(topic)) == 3
        consumer = c.subscribe(topic, "s")
        producer = c.create_producer(topic)
        for i in range(6):
            producer.send(f"m{i}".encode())
        assert sorted(consumer.receive(5000).data() for _ in range(6)) == [
            f"m{i}".encode() for i in range(6)
        ]
    finally:
        c.close()
        b.stop()


def test_key_shared_one_consumer_per_key_in_order(client: pulsar.Client) -> None:
    topic = _topic()
    consumers = [
        client.subscribe(
            topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=name
        )
        for name in ("a", "b", "c")
    ]
    producer = client.create_producer(topic)
    keys = [f"key-{i}" for i in range(12)]
    for round_ in range(10):
        for k in keys:
            producer.send(f"{k}:{round_}".encode(), partition_key=k)
    seen: dict[str, list[int]] = {}
    owner: dict[str, int] = {}
    total = 0
    deadline = time.monotonic() + 10
    while total < 120:
        assert time.monotonic() < deadline
        for i, c in enumerate(consumers):
            try:
                m = c.receive(50)
            except pulsar.Timeout:
                continue
            key, round_ = m.data().decode().split(":")
            assert owner.setdefault(key, i) == i  # a key never moves while all stay
            seen.setdefault(key, []).append(int(round_))
            c.acknowledge(m)
            total += 1
    assert all(v == list(range(10)) for v in seen.values())
    assert len(set(owner.values())) > 1


def test_unload_topic_clients_reconnect_without_loss(
    broker: InProcessBroker, client: pulsar.Client
) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub", consumer_type=Shared)
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    assert broker.service is not None
    service = broker.service
    before = service.topics[topic]
    broker.call(lambda: service.unload_topic(topic))
    for i in range(5, 10):
        producer.send(f"m{i}".encode())  # reconnects: lookup, PRODUCER, then SEND
    got = sorted(m.data() for m in _drain(consumer, 10))
    assert got == sorted(f"m{i}".encode() for i in range(10))
    assert service.topics[topic] is not before  # served by a freshly loaded topic


def test_delayed_delivery_on_shared(client: pulsar.Client) -> None:
    import datetime

    topic = _topic()
    shared = client.subscribe(topic, "shared", consumer_type=Shared)
    exclusive = client.subscribe(topic, "excl", consumer_type=Exclusive)
    producer = client.create_producer(topic)
    producer.send(b"later", deliver_after=datetime.timedelta(milliseconds=1500))
    producer.send(b"now")
    assert shared.receive(5000).data() == b"now"  # "later" is held back
    later = shared.receive(5000)
    assert later.data() == b"later"
    assert int(time.time() * 1000) >= later.publish_timestamp() + 1500
    # Exclusive subscriptions ignore the delay, as Pulsar's
    assert [exclusive.receive(5000).data() for _ in range(2)] == [b"later", b"now"]


def test_regex_subscription_sees_namespace_topics(client: pulsar.Client) -> None:
    import re

    prefix = f"rx{uuid.uuid4().hex[:6]}"
    for name in ("a", "b"):
        client.create_producer(f"persistent://public/default/{prefix}-{name}").send(name.encode())
    consumer = client.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"),
        "rx",
        initial_position=Earliest,
    )
    assert sorted(consumer.receive(5000).data() for _ in range(2)) == [b"a", b"b"]


def test_failover_partitions_spread_by_index_mod_consumers(
    broker: InProcessBroker, client: pulsar.Client
) -> None:
    topic = _topic("fo")
    local = topic.rsplit("/", 1)[1]
    assert broker.service is not None
    resources = broker.service.resources
    broker.call(lambda: resources.create_partitioned("public", "default", "persistent", local, 4))
    a = client.subscribe(topic, "sub", consumer_type=Failover, consumer_name="a")
    b = client.subscribe(topic, "sub", consumer_type=Failover, consumer_name="b")
    producer = client.create_producer(
        topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
    )
    for i in range(40):
        producer.send(f"m{i}".encode())
    got: dict[str, set[int]] = {"a": set(), "b": set()}
    total = 0
    deadline = time.monotonic() + 10
    while total < 40:
        assert time.monotonic() < deadline
        for name, c in (("a", a), ("b", b)):
            try:
                m = c.receive(50)
            except pulsar.Timeout:
                continue
            got[name].add(int(m.topic_name().rsplit("-", 1)[1]))
            c.acknowledge(m)
            total += 1
    assert got == {"a": {0, 2}, "b": {1, 3}}


class _FencingOnce:
    """Memory storage whose first append on each ledger is refused as fenced."""

    def __init__(self) -> None:
        from magnetar.broker.storage.memory import MemoryStorageFactory

        self.inner = MemoryStorageFactory()
        self.fenced: list[str] = []

    async def open(self, name: str):  # type: ignore[no-untyped-def]
        from magnetar.broker.ledger.errors import ManagedLedgerFenced

        ledger = await self.inner.open(name)
        if name not in self.fenced:
            self.fenced.append(name)
            real = ledger.add_entries_then

            def refuse(datas: list[bytes], then):  # type: ignore[no-untyped-def]
                ledger.add_entries_then = real  # type: ignore[method-assign]
                raise ManagedLedgerFenced("taken over (test)")

            ledger.add_entries_then = refuse  # type: ignore[method-assign]
        return ledger

    async def exists(self, name: str) -> bool:
        return await self.inner.exists(name)

    async def delete(self, name: str) -> None:
        await self.inner.delete(name)

    async def list(self, prefix: str) -> list[str]:
        return await self.inner.list(prefix)

    def memory_statistics(self):  # type: ignore[no-untyped-def]
        return self.inner.memory_statistics()

    def failure_statistics(self):  # type: ignore[no-untyped-def]
        return self.inner.failure_statistics()

    def offload_worker_statistics(self):  # type: ignore[no-untyped-def]
        return self.inner.offload_worker_statistics()


def test_fenced_topic_is_unloaded_and_the_client_recovers() -> None:
    b = InProcessBroker(storage=_FencingOnce()).start()
    c = pulsar.Client(b.service_url, operation_timeout_seconds=10)
    try:
        topic = _topic()
        consumer = c.subscribe(topic, "s")
        assert b.service is not None
        first = b.service.topics[topic]
        producer = c.create_producer(topic)
        producer.send(b"survives")  # refused once (fenced), resent after reconnecting
        assert consumer.receive(10_000).data() == b"survives"
        assert b.service.topics[topic] is not first
        assert _nothing_more(consumer)
    finally:
        c.close()
        b.stop()


def test_batch_index_acks_survive_reconnect(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub", consumer_type=Shared, batch_index_ack_enabled=True)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10)
    for i in range(10):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    got = _drain(consumer, 10)
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got}) == 1
    for m in got[::2]:
        consumer.acknowledge(m)  # half of one batch entry
    consumer.close()
    consumer = client.subscribe(topic, "sub", consumer_type=Shared, batch_index_ack_enabled=True)
    again = sorted(m.data() for m in _drain(consumer, 5))
    assert again == sorted(f"m{i}".encode() for i in range(1, 10, 2))
    assert _nothing_more(consumer)


def test_string_schema_producer_and_consumer(client: pulsar.Client) -> None:
    from pulsar.schema import StringSchema

    topic = _topic()
    consumer = client.subscribe(topic, "sub", schema=StringSchema())
    producer = client.create_producer(topic, schema=StringSchema())
    producer.send("héllo")
    assert consumer.receive(5000).value() == "héllo"


def test_non_persistent_topic_delivers_to_connected_consumers_only(client: pulsar.Client) -> None:
    topic = f"non-persistent://public/default/np-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic)
    producer.send(b"nobody-listens")  # no subscription yet: dropped
    shared_a = client.subscribe(topic, "s", consumer_type=Shared)
    shared_b = client.subscribe(topic, "s", consumer_type=Shared)
    exclusive = client.subscribe(topic, "e")
    for i in range(4):
        producer.send(f"m{i}".encode())
    assert [exclusive.receive(5000).data() for _ in range(4)] == [
        f"m{i}".encode() for i in range(4)
    ]
    got = []
    for c in (shared_a, shared_b):
        while True:
            try:
                got.append(c.receive(300).data())
            except pulsar.Timeout:
                break
    assert sorted(got) == [f"m{i}".encode() for i in range(4)]


def test_non_persistent_key_shared_keeps_each_key_on_one_consumer(client: pulsar.Client) -> None:
    topic = f"non-persistent://public/default/npks-{uuid.uuid4().hex[:8]}"
    consumers = [
        client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared) for _ in range(2)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(60):
        producer.send(f"{i % 6}:{i}".encode(), partition_key=f"key-{i % 6}")
    owner: dict[str, int] = {}
    received = 0
    for index, c in enumerate(consumers):
        while True:
            try:
                msg = c.receive(500)
            except pulsar.Timeout:
                break
            received += 1
            assert owner.setdefault(msg.partition_key(), index) == index
    assert received == 60
    assert len(owner) == 6


def test_namespace_deduplication_policy(broker: InProcessBroker, client: pulsar.Client) -> None:
    assert broker.service is not None
    resources = broker.service.resources
    broker.call(lambda: resources.create_namespace("public", "dedup"))
    broker.call(
        lambda: resources.update_policies("public", "dedup", {"deduplicationEnabled": True})
    )
    topic = f"persistent://public/dedup/t-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, producer_name="p")
    ids = [producer.send(f"s{seq}".encode(), sequence_id=seq) for seq in (0, 1, 1)]
    assert ids[2].ledger_id() == -1  # a duplicate is acknowledged, not stored
    assert [m.data() for m in _drain(consumer, 2)] == [b"s0", b"s1"]
    assert _nothing_more(consumer)


def test_exclusive_with_fencing_takes_over(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub")
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    first.send(b"first")
    second = client.create_producer(
        topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing
    )
    second.send(b"second")
    with pytest.raises(pulsar.PulsarException):
        first.send(b"fenced")
    assert [m.data() for m in _drain(consumer, 2)] == [b"first", b"second"]
    assert _nothing_more(consumer)


def test_stats_and_metrics_reflect_traffic(broker: InProcessBroker, client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    _drain(consumer, 3)
    assert broker.service is not None
    service = broker.service
    stats = broker.call(lambda: TopicOperations(service).topic_stats(topic))
    assert stats["msgInCounter"] == 3
    assert stats["subscriptions"]["sub"]["consumers"][0]["msgOutCounter"] == 3
    text = BrokerMetrics(service).render()
    labels = {"cluster": "standalone", "namespace": "public/default", "topic": topic}
    assert sample(text, "pulsar_in_messages_total", **labels) == 3
    assert sample(text, "pulsar_out_entries_total", **labels) == 3


def test_chunked_messages_on_shared_stay_with_one_consumer(client: pulsar.Client) -> None:
    topic = _topic()
    consumers = [client.subscribe(topic, "sub", consumer_type=Shared) for _ in range(2)]
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    payloads = [bytes([i]) * (6 * 1024 * 1024) for i in range(3)]  # 2 chunks each
    for p in payloads:
        producer.send(p)
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 3:
        assert time.monotonic() < deadline
        for c in consumers:
            try:
                m = c.receive(100)
            except pulsar.Timeout:
                continue
            got.append(m.data())
            c.acknowledge(m)
    assert sorted(got) == sorted(payloads)

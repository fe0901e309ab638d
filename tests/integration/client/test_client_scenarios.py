"""``magnetar.client`` against a real in-process ``BrokerService`` on a free port: the compat
scenario list (subscription types, batching, chunking, acks, nack/ack-timeout redelivery,
DLQ, readers, seek, partitions, failover) and reconnection after a broker restart."""

from __future__ import annotations

import asyncio
import re
import socket
import uuid

import pytest
from support.broker import InProcessBroker
from support.waiting import wait_for

from magnetar.broker.storage.memory import MemoryStorageFactory
from magnetar.client import (
    Client,
    CompressionType,
    ConsumerBusy,
    ConsumerDeadLetterPolicy,
    ConsumerType,
    CumulativeAcknowledgementNotAllowedError,
    InitialPosition,
    MessageId,
    MultiplierRedeliveryBackoff,
    ProducerQueueIsFull,
    Timeout,
)
from magnetar.zk.memory import MemoryMetadataServer

Earliest = InitialPosition.Earliest


def _topic(prefix: str = "t") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


async def _drain(consumer, n: int, timeout_ms: int = 5000) -> list:  # type: ignore[no-untyped-def]
    return [await consumer.receive(timeout_ms) for _ in range(n)]


async def _nothing_more(consumer, timeout_ms: int = 300) -> bool:  # type: ignore[no-untyped-def]
    try:
        await consumer.receive(timeout_ms)
    except Timeout:
        return True
    return False


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
@pytest.mark.parametrize(
    "sub_type",
    [ConsumerType.Exclusive, ConsumerType.Shared, ConsumerType.Failover, ConsumerType.KeyShared],
    ids=lambda t: t.name,
)
async def test_each_subscription_type(
    client: Client, sub_type: ConsumerType, batching: bool
) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", consumer_type=sub_type)
    producer = await client.create_producer(topic, batching_enabled=batching)
    futures = [
        await producer.send_async(
            f"m{i}".encode(), properties={"i": str(i)}, event_timestamp=1000 + i
        )
        for i in range(50)
    ]
    await producer.flush()
    ids = [f.result() for f in futures]
    assert len(set(ids)) == 50
    if batching:
        assert any(i.batch_index() > 0 for i in ids)
    got = await _drain(consumer, 50)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(50)]
    assert [m.message_id() for m in got] == ids
    assert got[7].properties() == {"i": "7"} and got[7].event_timestamp() == 1007
    for m in got:
        await consumer.acknowledge(m)
    assert await _nothing_more(consumer)
    for part in producer.partitions:
        part.check_invariants()
    for cpart in consumer.partitions:
        cpart.check_invariants()


async def test_second_exclusive_consumer_is_refused(client: Client) -> None:
    topic = _topic()
    await client.subscribe(topic, "sub")
    with pytest.raises(ConsumerBusy):
        await client.subscribe(topic, "sub")


async def test_chunked_10mb_message(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub")
    producer = await client.create_producer(topic, chunking_enabled=True)
    payload = bytes(range(256)) * (10 * 1024 * 1024 // 256)
    mid = await producer.send(payload)
    msg = await consumer.receive(10_000)
    assert msg.data() == payload
    assert msg.message_id() == mid
    assert len(mid._chunk_ids) >= 2
    await consumer.acknowledge(msg)
    assert await _nothing_more(consumer)


async def test_message_too_big_without_chunking(client: Client) -> None:
    from magnetar.client import MessageTooBig

    producer = await client.create_producer(_topic())
    with pytest.raises(MessageTooBig):
        await producer.send(b"x" * (6 * 1024 * 1024))


@pytest.mark.parametrize("codec", [c for c in CompressionType if c != CompressionType.NONE])
async def test_compression_codecs(client: Client, codec: CompressionType) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub")
    for batching in (False, True):
        producer = await client.create_producer(
            topic, compression_type=codec, batching_enabled=batching
        )
        for i in range(5):
            await producer.send_async(b"payload-%d " % i * 50)
        await producer.flush()
        await producer.close()
    got = await _drain(consumer, 10)
    assert [m.data() for m in got] == [b"payload-%d " % (i % 5) * 50 for i in range(10)]


async def test_individual_and_cumulative_acks_survive_reconnect(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=5)
    for i in range(20):
        await producer.send_async(f"m{i}".encode())
    await producer.flush()
    got = await _drain(consumer, 20)
    await consumer.acknowledge_cumulative(got[11])  # in the middle of a batch
    await consumer.acknowledge(got[15])
    await consumer.close()
    consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    rest = await _drain(consumer, 10)
    # the batch of m10..m14 comes back whole (entry-level acks); m15 is in a partially acked batch
    data = [m.data() for m in rest]
    assert data[:5] == [f"m{i}".encode() for i in range(10, 15)]
    assert data[5:] == [f"m{i}".encode() for i in range(15, 20)]
    shared = await client.subscribe(topic, "other", consumer_type=ConsumerType.Shared)
    with pytest.raises(CumulativeAcknowledgementNotAllowedError):
        await shared.acknowledge_cumulative(got[0].message_id())


async def test_nack_redelivers_with_increasing_count_then_dlq(client: Client) -> None:
    topic = _topic()
    dlq = await client.subscribe(f"{topic}-sub-DLQ", "dlq-reader", initial_position=Earliest)
    consumer = await client.subscribe(
        topic,
        "sub",
        consumer_type=ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=ConsumerDeadLetterPolicy(max_redeliver_count=2),
    )
    producer = await client.create_producer(topic)
    await producer.send(b"poison", properties={"p": "1"}, partition_key="k")
    counts = []
    for _ in range(3):
        msg = await consumer.receive(5000)
        counts.append(msg.redelivery_count())
        await consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2]
    dead = await dlq.receive(5000)
    assert dead.data() == b"poison"
    assert dead.properties()["p"] == "1"
    assert dead.properties()["REAL_TOPIC"] == topic
    assert dead.partition_key() == "k"
    assert await _nothing_more(consumer, 500)


async def test_nack_backoff_and_ack_timeout_redeliver(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(
        topic,
        "sub",
        consumer_type=ConsumerType.Shared,
        negative_ack_redelivery_backoff=MultiplierRedeliveryBackoff(50, 400, 2),
        unacked_messages_timeout_ms=1000,
        ack_group_time_ms=10,
    )
    producer = await client.create_producer(topic)
    await producer.send(b"a")
    first = await consumer.receive(5000)
    await consumer.negative_acknowledge(first)
    again = await consumer.receive(5000)
    assert again.data() == b"a" and again.redelivery_count() == 1
    # not acked: the ack timeout brings it back
    third = await consumer.receive(5000)
    assert third.redelivery_count() == 2
    await consumer.acknowledge(third)
    assert await _nothing_more(consumer, 1500)


async def test_readers_earliest_latest_and_message_id(client: Client) -> None:
    topic = _topic()
    producer = await client.create_producer(topic)
    ids = [await producer.send(f"m{i}".encode()) for i in range(5)]
    earliest = await client.create_reader(topic, MessageId.earliest)
    assert await earliest.has_message_available()
    assert [(await earliest.read_next(5000)).data() for _ in range(5)] == [
        f"m{i}".encode() for i in range(5)
    ]
    assert not await earliest.has_message_available()
    latest = await client.create_reader(topic, MessageId.latest)
    assert not await latest.has_message_available()
    after = await client.create_reader(topic, ids[2])
    assert (await after.read_next(5000)).data() == b"m3"
    inclusive = await client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert (await inclusive.read_next(5000)).data() == b"m2"
    last_inclusive = await client.create_reader(
        topic, MessageId.latest, start_message_id_inclusive=True
    )
    assert (await last_inclusive.read_next(5000)).data() == b"m4"
    await producer.send(b"new")
    assert (await latest.read_next(5000)).data() == b"new"
    assert (await last_inclusive.read_next(5000)).data() == b"new"
    assert await after.has_message_available()


async def test_seek_by_time_and_by_id(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", initial_position=Earliest)
    producer = await client.create_producer(topic)
    for i in range(3):
        await producer.send(f"old{i}".encode())
    old = await _drain(consumer, 3)
    cut = max(m.publish_timestamp() for m in old) + 1
    # publish times are wall-clock ms: move past the cut
    await wait_for(lambda: client.clock.now_ms() > cut, 5, "the wall clock past the cut")
    for i in range(3):
        await producer.send(f"new{i}".encode())
    got = await _drain(consumer, 3)
    for m in old + got:
        await consumer.acknowledge(m)
    await consumer.seek(cut)
    assert [m.data() for m in await _drain(consumer, 3)] == [b"new0", b"new1", b"new2"]
    await consumer.seek(MessageId.earliest)
    assert (await consumer.receive(5000)).data() == b"old0"
    reader = await client.create_reader(topic, MessageId.earliest)
    await reader.seek(cut)
    assert (await reader.read_next(5000)).data() == b"new0"


async def test_partitioned_topic_key_routing(broker: InProcessBroker, client: Client) -> None:
    topic = _topic("part")
    local = topic.rsplit("/", 1)[1]
    assert broker.service is not None
    resources = broker.service.resources
    broker.call(lambda: resources.create_partitioned("public", "default", "persistent", local, 4))
    assert await client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(4)]
    consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    producer = await client.create_producer(topic)
    keys = [f"k{i}" for i in range(8)]
    for round_ in range(5):
        for k in keys:
            await producer.send(f"{k}:{round_}".encode(), partition_key=k)
    for i in range(8):
        await producer.send(f"rr{i}".encode())  # round robin: spread over partitions
    got = await _drain(consumer, 48)
    partition_of: dict[str, set[str]] = {}
    for m in got:
        if m.partition_key():
            partition_of.setdefault(m.partition_key(), set()).add(m.topic_name())
        await consumer.acknowledge(m)
    assert sorted(partition_of) == keys
    assert all(len(parts) == 1 for parts in partition_of.values())
    assert len({p for parts in partition_of.values() for p in parts}) > 1
    assert len({m.topic_name() for m in got if not m.partition_key()}) == 4
    # multi-topic and regex subscriptions see the partitions too
    regex = await client.subscribe(
        re.compile(f"persistent://public/default/{local}"), "re", initial_position=Earliest
    )
    assert len(await _drain(regex, 48)) == 48


async def test_failover_switches_without_loss(client: Client) -> None:
    topic = _topic()
    first = await client.subscribe(
        topic, "sub", consumer_type=ConsumerType.Failover, consumer_name="a"
    )
    second = await client.subscribe(
        topic, "sub", consumer_type=ConsumerType.Failover, consumer_name="b"
    )
    producer = await client.create_producer(topic)
    for i in range(20):
        await producer.send(f"m{i}".encode())
    got = await _drain(first, 20)
    assert await _nothing_more(second, 200)
    for m in got[:10]:
        await first.acknowledge(m)
    await first.close()
    rest = await _drain(second, 10)
    assert [m.data() for m in rest] == [f"m{i}".encode() for i in range(10, 20)]


async def test_bounded_pending_queue_and_listener(client: Client) -> None:
    topic = _topic()
    received: list[bytes] = []
    done = asyncio.Event()

    async def listener(consumer, msg) -> None:  # type: ignore[no-untyped-def]
        received.append(msg.data())
        await consumer.acknowledge(msg)
        if len(received) == 30:
            done.set()

    await client.subscribe(topic, "sub", message_listener=listener)
    producer = await client.create_producer(
        topic, max_pending_messages=10, batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(10):
        await producer.send_async(f"m{i}".encode())
    with pytest.raises(ProducerQueueIsFull):
        await producer.send_async(b"overflow")
    await producer.flush()
    blocking = await client.create_producer(topic, max_pending_messages=2, block_if_queue_full=True)
    for i in range(10, 30):
        await blocking.send_async(f"m{i}".encode())
    await blocking.flush()
    await asyncio.wait_for(done.wait(), 10)
    assert received == [f"m{i}".encode() for i in range(30)]


async def test_unsubscribe_and_iteration(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub")
    producer = await client.create_producer(topic)
    for i in range(3):
        await producer.send(f"m{i}".encode())
    seen = []
    async for msg in consumer:
        seen.append(msg.data())
        await consumer.acknowledge(msg)
        if len(seen) == 3:
            break
    assert seen == [b"m0", b"m1", b"m2"]
    await consumer.unsubscribe()
    await producer.send(b"after")
    fresh = await client.subscribe(topic, "sub")  # a new subscription starts at the end
    assert await _nothing_more(fresh)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_reconnects_after_broker_restart() -> None:
    metadata = MemoryMetadataServer()
    storage = MemoryStorageFactory()
    port = _free_port()
    broker = InProcessBroker(metadata, storage, broker_service_port=port).start()
    client = Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
    topic = _topic("restart")
    try:
        consumer = await client.subscribe(
            topic, "sub", consumer_type=ConsumerType.Shared, ack_receipt_enabled=True
        )
        producer = await client.create_producer(topic)
        acked = [await producer.send(f"a{i}".encode()) for i in range(10)]
        assert len(acked) == 10
        first = await _drain(consumer, 5)
        for m in first:
            await consumer.acknowledge(m)  # returns once the broker confirmed it
        broker.stop()
        pending = [await producer.send_async(f"b{i}".encode()) for i in range(5)]
        broker = InProcessBroker(metadata, storage, broker_service_port=port).start()
        ids = await asyncio.wait_for(asyncio.gather(*pending), 30)
        assert len(ids) == 5
        expected = {f"a{i}".encode() for i in range(10)} | {f"b{i}".encode() for i in range(5)}
        seen = [m.data() for m in first]
        while not expected <= set(seen):  # bounded: receive raises Timeout after 20 s
            seen.append((await consumer.receive(20_000)).data())
            assert len(seen) <= 40
        rest = seen[len(first) :]
        assert not set(rest) & {m.data() for m in first}  # nothing acknowledged came back
        assert producer.partitions[0].reconnects >= 1
    finally:
        await client.close()
        broker.stop()

"""More ``magnetar.client`` behaviours against the in-process broker: redelivery on ordered
subscriptions, Key_Shared with key-based batches, topic lists, retry letters, batch-index
acks, zero receiver queue, the sync facade, HTTP lookup, and timers on a virtual clock."""

from __future__ import annotations

import asyncio
import datetime
import re
import threading
import uuid
from collections.abc import Iterator

import pytest
from support.broker import InProcessBroker
from support.client_fake_broker import FakeBroker
from support.waiting import wait_for

from magnetar.client import (
    BatchingType,
    Client,
    ConsumerDeadLetterPolicy,
    ConsumerType,
    InitialPosition,
    MessageId,
    Timeout,
)
from magnetar.client.protocol import CommandType
from magnetar.client.sync import Client as SyncClient
from magnetar.clock import VirtualClock

Earliest = InitialPosition.Earliest


def _topic(prefix: str = "more") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def broker() -> Iterator[InProcessBroker]:
    b = InProcessBroker().start()
    try:
        yield b
    finally:
        b.stop()


async def _nothing_more(consumer, timeout_ms: int = 300) -> bool:  # type: ignore[no-untyped-def]
    try:
        await consumer.receive(timeout_ms)
    except Timeout:
        return True
    return False


@pytest.mark.parametrize("sub_type", [ConsumerType.Exclusive, ConsumerType.Failover])
async def test_nack_on_ordered_subscription_redelivers_everything_unacked(
    client: Client, sub_type: ConsumerType
) -> None:
    topic = _topic()
    consumer = await client.subscribe(
        topic, "sub", consumer_type=sub_type, negative_ack_redelivery_delay_ms=100
    )
    producer = await client.create_producer(topic)
    for i in range(4):
        await producer.send(f"m{i}".encode())
    got = [await consumer.receive(5000) for _ in range(4)]
    await consumer.acknowledge(got[0])
    await consumer.negative_acknowledge(got[2])
    again = [(await consumer.receive(5000)).data() for _ in range(3)]
    assert again == [b"m1", b"m2", b"m3"]  # everything unacked, in order


async def test_key_shared_with_key_based_batches(client: Client) -> None:
    topic = _topic()
    c1 = await client.subscribe(
        topic, "ks", consumer_type=ConsumerType.KeyShared, consumer_name="a"
    )
    c2 = await client.subscribe(
        topic, "ks", consumer_type=ConsumerType.KeyShared, consumer_name="b"
    )
    producer = await client.create_producer(
        topic, batching_enabled=True, batching_type=BatchingType.KeyBased
    )
    keys = [f"key{i}" for i in range(10)]
    for r in range(5):
        for k in keys:
            await producer.send_async(f"{k}:{r}".encode(), partition_key=k)
    await producer.flush()
    owner: dict[str, set[str]] = {}
    order: dict[str, list[int]] = {}
    total = 0
    for name, consumer in (("a", c1), ("b", c2)):
        while True:
            try:
                m = await consumer.receive(500)
            except Timeout:
                break
            total += 1
            owner.setdefault(m.partition_key(), set()).add(name)
            order.setdefault(m.partition_key(), []).append(int(m.data().split(b":")[1]))
            await consumer.acknowledge(m)
    assert total == 50
    assert all(len(v) == 1 for v in owner.values())
    assert all(v == sorted(v) for v in order.values())


async def test_topic_list_subscription(client: Client) -> None:
    topics = [_topic(), _topic()]
    consumer = await client.subscribe(topics, "sub")
    for i, t in enumerate(topics):
        await (await client.create_producer(t)).send(f"from{i}".encode())
    got = {(await consumer.receive(5000)).data() for _ in range(2)}
    assert got == {b"from0", b"from1"}


async def test_retry_letter_topic(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(
        topic,
        "sub",
        consumer_type=ConsumerType.Shared,
        retry_enable=True,
        dead_letter_policy=ConsumerDeadLetterPolicy(max_redeliver_count=2),
    )
    dlq = await client.subscribe(f"{topic}-sub-DLQ", "audit", initial_position=Earliest)
    producer = await client.create_producer(topic)
    await producer.send(b"job", properties={"id": "7"})
    times = []
    for _ in range(3):
        msg = await consumer.receive(10_000)
        times.append(msg.properties().get("RECONSUMETIMES", "0"))
        await consumer.reconsume_later(msg, 10)
    assert times == ["0", "1", "2"]
    dead = await dlq.receive(5000)
    assert dead.data() == b"job"
    assert dead.properties()["id"] == "7"
    assert dead.properties()["RECONSUMETIMES"] == "3"
    assert await _nothing_more(consumer, 500)


async def test_batch_index_acks_redeliver_only_unacked_members(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", batch_index_ack_enabled=True)
    producer = await client.create_producer(topic, batching_enabled=True)
    for i in range(4):
        await producer.send_async(f"m{i}".encode())
    await producer.flush()
    got = [await consumer.receive(5000) for _ in range(4)]
    assert {m.message_id().entry_id() for m in got} == {got[0].message_id().entry_id()}
    await consumer.acknowledge(got[0])
    await consumer.acknowledge(got[2])
    await consumer.close()
    consumer = await client.subscribe(topic, "sub", batch_index_ack_enabled=True)
    again = [(await consumer.receive(5000)).data() for _ in range(2)]
    assert again == [b"m1", b"m3"]


async def test_zero_receiver_queue(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", receiver_queue_size=0)
    producer = await client.create_producer(topic)
    for i in range(3):
        await producer.send(f"m{i}".encode())
    assert [(await consumer.receive(5000)).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
    part = consumer.partitions[0]
    assert consumer.statistics()[0].queued_messages == 0
    assert part.queue_size == 0


async def test_reader_resumes_after_reconnect_without_duplicates(client: Client) -> None:
    topic = _topic()
    producer = await client.create_producer(topic)
    for i in range(6):
        await producer.send(f"m{i}".encode())
    reader = await client.create_reader(topic, MessageId.earliest, receiver_queue_size=2)
    first = [(await reader.read_next(5000)).data() for _ in range(3)]
    cnx = reader.consumer.partitions[0].cnx
    assert cnx is not None
    await cnx.close("test: drop the connection")
    rest = [(await reader.read_next(5000)).data() for _ in range(3)]
    assert first + rest == [f"m{i}".encode() for i in range(6)]


async def test_get_last_message_id(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub")
    producer = await client.create_producer(topic)
    last = [await producer.send(b"x") for _ in range(3)][-1]
    got = await consumer.get_last_message_id()
    assert (got.ledger_id(), got.entry_id()) == (last.ledger_id(), last.entry_id())


def test_sync_facade_listener_and_callbacks(broker: InProcessBroker) -> None:
    topic = _topic()
    client = SyncClient(broker.service_url, operation_timeout_seconds=5)
    try:
        seen: list[bytes] = []
        done = threading.Event()

        def listener(consumer, msg) -> None:  # type: ignore[no-untyped-def]
            seen.append(msg.data())
            consumer.acknowledge(msg)  # calling back into the facade from a listener
            if len(seen) == 5:
                done.set()

        client.subscribe(topic, "sub", message_listener=listener)
        producer = client.create_producer(topic, batching_enabled=True)
        results: list[object] = []
        for i in range(5):
            producer.send_async(f"m{i}".encode(), lambda exc, mid: results.append(exc or mid))
        producer.flush()
        assert done.wait(10)
        assert seen == [f"m{i}".encode() for i in range(5)]
        assert all(isinstance(r, MessageId) for r in results)
        assert client.get_topic_partitions(topic) == [topic]
    finally:
        client.close()


async def test_http_service_url_lookup(broker: InProcessBroker) -> None:
    from aiohttp import web

    from magnetar.broker.admin.http_api import AdminApi

    service = broker.service
    assert service is not None

    async def start_http() -> tuple[web.AppRunner, int]:
        runner = web.AppRunner(AdminApi.of_service(service).app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    runner, port = broker.call(start_http)
    try:
        topic = _topic("http")
        local = topic.rsplit("/", 1)[1]
        broker.call(
            lambda: service.resources.create_partitioned(
                "public", "default", "persistent", local, 2
            )
        )
        async with Client(f"http://127.0.0.1:{port}", operation_timeout_seconds=5) as client:
            assert len(await client.get_topic_partitions(topic)) == 2
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic)
            for i in range(4):
                await producer.send(f"m{i}".encode())
            got = sorted([(await consumer.receive(5000)).data() for _ in range(4)])
            assert got == [b"m0", b"m1", b"m2", b"m3"]
    finally:
        broker.call(runner.cleanup)


async def test_timers_follow_the_injected_clock(fake_broker: FakeBroker) -> None:
    fake_broker.handlers[CommandType.SEND] = lambda b, c, e: []  # never answer
    clock = VirtualClock()
    async with Client(fake_broker.url, clock=clock) as client:
        producer = await client.create_producer("t", send_timeout_millis=30_000)
        fut = await producer.send_async(b"x")
        await fake_broker.wait_for(lambda: len(fake_broker.of_type(CommandType.SEND)) == 1)
        clock.advance(29)
        for _ in range(5):
            await asyncio.sleep(0)
        assert not fut.done()
        clock.advance(2)  # 31 s of virtual time, no real waiting
        with pytest.raises(Timeout):
            await asyncio.wait_for(fut, 5)


async def test_delayed_delivery(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    producer = await client.create_producer(topic)
    await producer.send(b"later", deliver_after=datetime.timedelta(milliseconds=1500))
    await producer.send(b"at", deliver_at=client.clock.now_ms() + 1500)
    await producer.send(b"now")
    assert (await consumer.receive(5000)).data() == b"now"
    with pytest.raises(Timeout):
        await consumer.receive(300)  # held by the broker
    later = {(await consumer.receive(10_000)).data() for _ in range(2)}
    assert later == {b"later", b"at"}


def test_broker_deduplication_with_sequence_ids() -> None:
    b = InProcessBroker(broker_deduplication_enabled=True).start()

    async def scenario() -> None:
        async with Client(b.service_url, operation_timeout_seconds=5) as client:
            topic = _topic()
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic, producer_name="p1")
            for seq in (0, 1, 1, 2, 0, 3):
                await producer.send(f"s{seq}".encode(), sequence_id=seq)
            got = [(await consumer.receive(5000)).data() for _ in range(4)]
            assert got == [b"s0", b"s1", b"s2", b"s3"]
            assert await _nothing_more(consumer)
            await producer.close()
            again = await client.create_producer(topic, producer_name="p1")
            assert again.last_sequence_id() == 3
            mid = await again.send(b"next")  # gets sequence id 4
            assert mid.entry_id() >= 0
            assert (await consumer.receive(5000)).data() == b"next"

    try:
        asyncio.run(scenario())
    finally:
        b.stop()


async def test_exclusive_producer_access_mode(client: Client) -> None:
    from magnetar.client import ProducerAccessMode, ProducerBusy, ProducerFenced

    topic = _topic()
    await client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
    with pytest.raises((ProducerBusy, ProducerFenced)):
        await client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)


async def test_single_partition_and_custom_routing(broker: InProcessBroker, client: Client) -> None:
    from magnetar.client import PartitionsRoutingMode

    topic = _topic("route")
    local = topic.rsplit("/", 1)[1]
    service = broker.service
    assert service is not None
    broker.call(
        lambda: service.resources.create_partitioned("public", "default", "persistent", local, 3)
    )
    consumer = await client.subscribe(topic, "sub")
    single = await client.create_producer(
        topic, message_routing_mode=PartitionsRoutingMode.UseSinglePartition
    )
    custom = await client.create_producer(
        topic, message_router=lambda msg, n: int(msg.properties()["to"]) % n
    )
    for _ in range(6):
        await single.send(b"single")
        await custom.send(b"custom", properties={"to": "2"})
    where: dict[bytes, set[str]] = {}
    for _ in range(12):
        m = await consumer.receive(5000)
        where.setdefault(m.data(), set()).add(m.topic_name())
    assert len(where[b"single"]) == 1
    assert where[b"custom"] == {f"{topic}-partition-2"}


async def test_regex_subscription_discovers_new_topics(client: Client) -> None:
    prefix = f"disc-{uuid.uuid4().hex[:6]}"
    first = f"persistent://public/default/{prefix}-a"
    await (await client.create_producer(first)).send(b"warm-up")  # the topic exists
    consumer = await client.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"),
        "sub",
        pattern_auto_discovery_period=1,
        initial_position=Earliest,
    )
    assert (await consumer.receive(5000)).data() == b"warm-up"
    producer = await client.create_producer(f"persistent://public/default/{prefix}-b")
    await producer.send(b"discovered")
    assert (await consumer.receive(10_000)).data() == b"discovered"
    assert len(consumer.partitions) == 2


async def test_new_partitions_are_picked_up(broker: InProcessBroker) -> None:
    topic = _topic("grow")
    local = topic.rsplit("/", 1)[1]
    service = broker.service
    assert service is not None
    broker.call(
        lambda: service.resources.create_partitioned("public", "default", "persistent", local, 2)
    )
    async with Client(
        broker.service_url, operation_timeout_seconds=5, partitions_update_interval_seconds=0.2
    ) as client:
        consumer = await client.subscribe(topic, "sub", initial_position=Earliest)
        producer = await client.create_producer(topic)
        broker.call(
            lambda: service.resources.update_partitions("public", "default", "persistent", local, 3)
        )
        await wait_for(
            lambda: len(producer.partitions) == 3 and len(consumer.partitions) == 3,
            30,
            "the producer and consumer on 3 partitions",
        )
        for _ in range(3):
            await producer.send(b"x")  # round robin reaches the new partition
        topics = {(await consumer.receive(5000)).topic_name() for _ in range(3)}
        assert f"{topic}-partition-2" in topics


async def test_non_persistent_topic(client: Client) -> None:
    topic = f"non-persistent://public/default/np-{uuid.uuid4().hex[:8]}"
    consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    producer = await client.create_producer(topic, batching_enabled=True)
    for i in range(5):
        await producer.send_async(f"m{i}".encode())
    await producer.flush()
    got = [await consumer.receive(5000) for _ in range(5)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5)]
    for m in got:
        await consumer.acknowledge(m)  # accepted, nothing sent (as the C++ client)
    await consumer.flush_acknowledgements()
    assert consumer.statistics()[0].acked_entries_pending == 0


async def test_batch_receive_policy(client: Client) -> None:
    from magnetar.client import ConsumerBatchReceivePolicy

    topic = _topic()
    consumer = await client.subscribe(
        topic, "sub", batch_receive_policy=ConsumerBatchReceivePolicy(4, -1, 200)
    )
    producer = await client.create_producer(topic, batching_enabled=True)
    for i in range(6):
        await producer.send_async(f"m{i}".encode())
    await producer.flush()
    first = await consumer.batch_receive()
    assert [m.data() for m in first] == [b"m0", b"m1", b"m2", b"m3"]  # count limit
    rest: list[bytes] = []
    while len(rest) < 2:
        rest += [m.data() for m in await consumer.batch_receive()]  # timeout: what is there
    assert rest == [b"m4", b"m5"]
    assert await consumer.batch_receive() == []  # nothing within the timeout

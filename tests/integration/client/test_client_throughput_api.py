"""The throughput API of ``magnetar.client`` against a real in-process broker:
``Producer.send_batch``, ``Consumer.receive_batch`` (batch entries handed out undecoded) and
acknowledging a whole ``MessageBatch`` individually or cumulatively."""

from __future__ import annotations

import uuid

import pytest
from support.broker import InProcessBroker

from magnetar.client import (
    AlreadyClosed,
    Client,
    ConsumerType,
    InitialPosition,
    MessageBatch,
    MessageTooBig,
    ProducerQueueIsFull,
    SentMessageIds,
    Timeout,
)

Earliest = InitialPosition.Earliest


def _topic(prefix: str = "tp") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


async def _receive_all(consumer, n: int) -> list[MessageBatch]:  # type: ignore[no-untyped-def]
    batches: list[MessageBatch] = []
    got = 0
    while got < n:
        batch = await consumer.receive_batch(timeout_millis=10_000)
        batches.append(batch)
        got += len(batch)
    return batches


async def test_send_batch_splits_into_entries_in_order(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", initial_position=Earliest)
    producer = await client.create_producer(topic, batching_max_messages=100)
    payloads = [f"m-{i}".encode() for i in range(250)]
    ids = await (await producer.send_batch(payloads))
    assert isinstance(ids, SentMessageIds)
    assert len(ids) == 250
    assert [n for *_, n in ids.entries()] == [100, 100, 50]  # batching_max_messages
    assert [m.batch_index() for m in ids][:3] == [0, 1, 2]
    assert ids[100].entry_id() == ids[0].entry_id() + 1
    assert list(ids)[-1] == ids[-1]

    batches = await _receive_all(consumer, 250)
    assert [p for b in batches for p in b.payloads()] == payloads
    msgs = [m for b in batches for m in b]
    assert [m.data() for m in msgs] == payloads
    assert [m.message_id() for m in msgs] == list(ids)
    assert batches[0].data(1) == b"m-1"
    assert batches[0][-1].data() == batches[0].payloads()[-1]
    await producer.close()
    await consumer.close()


async def test_send_batch_after_send_async_keeps_order(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", initial_position=Earliest)
    producer = await client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=10_000
    )
    first = await producer.send_async(b"first")  # waits in the accumulator
    rest = await producer.send_batch([b"second", b"third"])
    await rest
    assert first.done()
    batches = await _receive_all(consumer, 3)
    assert [p for b in batches for p in b.payloads()] == [b"first", b"second", b"third"]
    await producer.close()


async def test_send_batch_respects_the_pending_limit(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", initial_position=Earliest)
    producer = await client.create_producer(
        topic, max_pending_messages=10, block_if_queue_full=True, batching_max_messages=1000
    )
    ids = await (await producer.send_batch([b"x"] * 95))  # entries of at most 10
    assert len(ids) == 95
    assert max(n for *_, n in ids.entries()) == 10
    assert len(await _receive_all(consumer, 95)) >= 10
    assert producer.partitions[0].statistics().pending_messages == 0
    producer.partitions[0].check_invariants()

    nonblocking = await client.create_producer(topic, max_pending_messages=5)
    await nonblocking.send_batch([b"y"] * 5)  # fills the queue
    with pytest.raises(ProducerQueueIsFull):
        await nonblocking.send_batch([b"z"])


async def test_receive_batch_is_lazy_and_acknowledge_batch_acks_every_member(
    client: Client,
) -> None:
    topic = _topic()
    consumer = await client.subscribe(
        topic, "sub", consumer_type=ConsumerType.Shared, initial_position=Earliest
    )
    producer = await client.create_producer(topic)
    await (await producer.send_batch([b"a%d" % i for i in range(20)]))
    batch = await consumer.receive_batch(max_messages=8, timeout_millis=10_000)
    assert batch._members is not None  # an undecoded batch entry, not 8 messages
    assert len(batch) == 8
    rest = await consumer.receive_batch(timeout_millis=10_000)
    assert len(rest) == 12
    assert rest.payloads()[0] == b"a8"
    await consumer.acknowledge(batch)
    await consumer.acknowledge(rest)
    await consumer.flush_acknowledgements()
    await consumer.close()

    # everything was acknowledged: a new consumer on the subscription gets nothing
    again = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    with pytest.raises(Timeout):
        await again.receive_batch(timeout_millis=500)


async def test_partial_batch_ack_redelivers_only_the_rest(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(
        topic, "sub", consumer_type=ConsumerType.Shared, initial_position=Earliest
    )
    producer = await client.create_producer(topic)
    await (await producer.send_batch([b"b%d" % i for i in range(10)]))
    batch = await consumer.receive_batch(max_messages=4, timeout_millis=10_000)
    await consumer.acknowledge(batch)  # 4 of 10: the entry is not acknowledged yet
    await consumer.flush_acknowledgements()
    await consumer.close()
    again = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    batches = await _receive_all(again, 10)
    # the whole entry comes back (the broker tracks entries); nothing was lost
    assert sorted(p for b in batches for p in b.payloads()) == sorted(b"b%d" % i for i in range(10))


async def test_cumulative_ack_of_a_batch(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", initial_position=Earliest)
    producer = await client.create_producer(topic, batching_max_messages=50)
    await (await producer.send_batch([b"c%d" % i for i in range(200)]))
    batches = await _receive_all(consumer, 200)
    await consumer.acknowledge_cumulative(batches[-1].last())
    await consumer.flush_acknowledgements()
    await consumer.close()
    again = await client.subscribe(topic, "sub")
    with pytest.raises(Timeout):
        await again.receive_batch(timeout_millis=500)


async def test_receive_batch_of_unbatched_messages(client: Client) -> None:
    topic = _topic()
    consumer = await client.subscribe(topic, "sub", initial_position=Earliest)
    producer = await client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        await producer.send(b"u%d" % i, properties={"i": str(i)})
    got: list[bytes] = []
    while len(got) < 5:
        batch = await consumer.receive_batch(timeout_millis=10_000)
        assert batch._members is None  # decoded messages
        got += batch.payloads()
        await consumer.acknowledge(batch)
    assert got == [b"u%d" % i for i in range(5)]
    # single receive still works after batched receives, on a mixed queue
    await (await producer.send_batch([b"v0", b"v1"]))
    await producer.send(b"w")
    assert (await consumer.receive(10_000)).data() == b"v0"
    assert (await consumer.receive(10_000)).data() == b"v1"
    assert (await consumer.receive(10_000)).data() == b"w"


def test_sync_facade_send_batch_receive_batch(broker: InProcessBroker) -> None:
    import threading

    from magnetar.client.sync import Client as SyncClient

    topic = _topic()
    client = SyncClient(broker.service_url, operation_timeout_seconds=5)
    try:
        consumer = client.subscribe(topic, "sub", initial_position=Earliest)
        producer = client.create_producer(topic)
        ids = producer.send_batch([b"s0", b"s1", b"s2"])
        assert len(ids) == 3
        got: list[object] = []
        done = threading.Event()

        def callback(exc: object, sent: object) -> None:
            got.append((exc, sent))
            done.set()

        producer.send_batch_async([b"s3"], callback)
        assert done.wait(10)
        assert got[0][0] is None  # type: ignore[index]
        payloads: list[bytes] = []
        while len(payloads) < 4:
            batch = consumer.receive_batch(timeout_millis=10_000)
            payloads += batch.payloads()
            consumer.acknowledge(batch)
        assert payloads == [b"s0", b"s1", b"s2", b"s3"]
    finally:
        client.close()


async def test_send_batch_too_big_fails_and_frees_its_slots(client: Client) -> None:
    producer = await client.create_producer(_topic())
    fut = await producer.send_batch([b"x" * (6 * 1024 * 1024)])  # over the 5 MB maximum
    with pytest.raises(MessageTooBig):
        await fut
    assert producer.partitions[0].statistics().pending_messages == 0
    await producer.close()
    with pytest.raises(AlreadyClosed):
        await producer.send_batch([b"late"])


async def test_send_batch_round_robins_entries_over_partitions(
    broker: InProcessBroker, client: Client
) -> None:
    topic = _topic("part")
    local = topic.rsplit("/", 1)[1]
    assert broker.service is not None
    resources = broker.service.resources
    broker.call(lambda: resources.create_partitioned("public", "default", "persistent", local, 3))
    consumer = await client.subscribe(topic, "sub", initial_position=Earliest)
    producer = await client.create_producer(topic, batching_max_messages=10)
    ids = await (await producer.send_batch([b"p%d" % i for i in range(60)]))
    assert sorted({e[1] for e in ids.entries()}) == [0, 1, 2]  # every partition got entries
    assert [m.partition() for m in ids][::10] == [e[1] for e in ids.entries()]
    got: list[bytes] = []
    while len(got) < 60:
        got += (await consumer.receive_batch(timeout_millis=10_000)).payloads()
    assert sorted(got) == sorted(b"p%d" % i for i in range(60))


async def test_readers_over_send_batch_entries(client: Client) -> None:
    from magnetar.client import MessageId

    topic = _topic("rd")
    producer = await client.create_producer(topic, batching_max_messages=5)
    ids = await (await producer.send_batch([b"r%d" % i for i in range(12)]))

    earliest = await client.create_reader(topic, MessageId.earliest)
    assert [(await earliest.read_next(10_000)).data() for _ in range(12)] == [
        b"r%d" % i for i in range(12)
    ]
    # a start inside a batch entry: the start filter still applies member by member
    middle = await client.create_reader(topic, ids[6])
    assert (await middle.read_next(10_000)).data() == b"r7"
    inclusive = await client.create_reader(topic, ids[6], start_message_id_inclusive=True)
    assert (await inclusive.read_next(10_000)).data() == b"r6"
    for r in (earliest, middle, inclusive):
        await r.close()

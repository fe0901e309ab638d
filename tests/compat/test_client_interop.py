"""``magnetar.client`` and the official client (pulsar-client 3.13) on the same topics of an
in-process broker, in both directions: batches, chunks, every compression codec, keys,
properties, event times, message ids and key routing. Our side uses the sync facade."""

from __future__ import annotations

import uuid

import pulsar
import pytest
from support.broker import InProcessBroker

from magnetar.client import CompressionType, InitialPosition, MessageId
from magnetar.client.sync import Client

CODECS = ["NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"]


def _topic(prefix: str = "interop") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def _same_id(official_id: pulsar.MessageId, our_id: MessageId) -> bool:
    return (
        official_id.ledger_id(),
        official_id.entry_id(),
        official_id.batch_index(),
    ) == (our_id.ledger_id(), our_id.entry_id(), our_id.batch_index())


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_official_producer_to_our_consumer(
    official: pulsar.Client, ours: Client, codec: str, batching: bool
) -> None:
    topic = _topic()
    consumer = ours.subscribe(topic, "sub")
    producer = official.create_producer(
        topic,
        batching_enabled=batching,
        compression_type=getattr(pulsar.CompressionType, codec),
        batching_max_publish_delay_ms=20,
    )
    sent: list[pulsar.MessageId] = []
    for i in range(20):
        producer.send_async(
            (f"m{i}-" * 40).encode(),
            lambda res, mid: sent.append(mid),
            properties={"i": str(i)},
            partition_key=f"k{i % 3}",
            event_timestamp=5000 + i,
        )
    producer.flush()
    got = [consumer.receive(5000) for _ in range(20)]
    assert [m.data() for m in got] == [(f"m{i}-" * 40).encode() for i in range(20)]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(20)]
    assert [m.partition_key() for m in got] == [f"k{i % 3}" for i in range(20)]
    assert [m.event_timestamp() for m in got] == [5000 + i for i in range(20)]
    assert all(_same_id(a, m.message_id()) for a, m in zip(sent, got, strict=True))
    if batching:
        assert any(m.message_id().batch_index() > 0 for m in got)
    for m in got:
        consumer.acknowledge(m)
    producer.close()
    consumer.close()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_our_producer_to_official_consumer(
    official: pulsar.Client, ours: Client, codec: str, batching: bool
) -> None:
    topic = _topic()
    consumer = official.subscribe(topic, "sub")
    producer = ours.create_producer(
        topic,
        batching_enabled=batching,
        compression_type=getattr(CompressionType, codec),
        batching_max_publish_delay_ms=20,
    )
    sent: list[MessageId | None] = []
    for i in range(20):
        producer.send_async(
            (f"m{i}-" * 40).encode(),
            lambda exc, mid: sent.append(mid),
            properties={"i": str(i)},
            partition_key=f"k{i % 3}",
            event_timestamp=5000 + i,
        )
    producer.flush()
    got = [consumer.receive(5000) for _ in range(20)]
    assert [m.data() for m in got] == [(f"m{i}-" * 40).encode() for i in range(20)]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(20)]
    assert [m.partition_key() for m in got] == [f"k{i % 3}" for i in range(20)]
    assert [m.event_timestamp() for m in got] == [5000 + i for i in range(20)]
    assert len(sent) == 20
    assert all(
        mid is not None and _same_id(m.message_id(), mid) for m, mid in zip(got, sent, strict=True)
    )
    for m in got:
        consumer.acknowledge(m)
    producer.close()
    consumer.close()


def test_chunks_both_directions(official: pulsar.Client, ours: Client) -> None:
    payload = bytes(range(256)) * (7 * 1024 * 1024 // 256)
    topic = _topic()
    theirs_in = official.subscribe(topic, "official")
    ours_in = ours.subscribe(topic, "ours")
    official.create_producer(topic, chunking_enabled=True, batching_enabled=False).send(payload)
    ours.create_producer(topic, chunking_enabled=True).send(payload[::-1])
    first, second = ours_in.receive(10_000), ours_in.receive(10_000)
    assert (first.data(), second.data()) == (payload, payload[::-1])
    assert len(first.message_id()._chunk_ids) >= 2  # really chunked
    assert len(second.message_id()._chunk_ids) >= 2
    assert theirs_in.receive(10_000).data() == payload
    assert theirs_in.receive(10_000).data() == payload[::-1]


def test_key_routing_matches_on_partitioned_topic(
    interop_broker: InProcessBroker, official: pulsar.Client, ours: Client
) -> None:
    topic = _topic("part")
    local = topic.rsplit("/", 1)[1]
    assert interop_broker.service is not None
    resources = interop_broker.service.resources
    interop_broker.call(
        lambda: resources.create_partitioned("public", "default", "persistent", local, 4)
    )
    consumer = ours.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    keys = [f"key-{i}-{uuid.uuid4().hex[:4]}" for i in range(24)]
    theirs = official.create_producer(topic)
    mine = ours.create_producer(topic)
    for k in keys:
        theirs.send(b"official", partition_key=k)
        mine.send(b"ours", partition_key=k)
    where: dict[str, set[str]] = {}
    for _ in range(2 * len(keys)):
        m = consumer.receive(5000)
        where.setdefault(m.partition_key(), set()).add(m.topic_name())
        consumer.acknowledge(m)
    assert sorted(where) == sorted(keys)
    assert all(len(parts) == 1 for parts in where.values()), where
    assert len({p for parts in where.values() for p in parts}) > 1


def test_message_ids_serialize_across_clients(official: pulsar.Client, ours: Client) -> None:
    topic = _topic()
    mid = ours.create_producer(topic).send(b"x")
    theirs = pulsar.MessageId.deserialize(mid.serialize())
    assert (theirs.ledger_id(), theirs.entry_id()) == (mid.ledger_id(), mid.entry_id())
    back = MessageId.deserialize(theirs.serialize())
    assert (back.ledger_id(), back.entry_id()) == (mid.ledger_id(), mid.entry_id())
    reader = official.create_reader(topic, theirs, start_message_id_inclusive=True)
    assert reader.read_next(5000).data() == b"x"


@pytest.mark.parametrize("codec", ["LZ4", "ZSTD"])
def test_compressed_chunks_both_directions(
    official: pulsar.Client, ours: Client, codec: str
) -> None:
    import random

    rng = random.Random(7)
    payload = rng.randbytes(6 * 1024 * 1024)  # incompressible: still chunked once compressed
    topic = _topic()
    theirs_in = official.subscribe(topic, "official")
    ours_in = ours.subscribe(topic, "ours")
    official.create_producer(
        topic,
        chunking_enabled=True,
        batching_enabled=False,
        compression_type=getattr(pulsar.CompressionType, codec),
    ).send(payload)
    ours.create_producer(
        topic, chunking_enabled=True, compression_type=getattr(CompressionType, codec)
    ).send(payload[::-1])
    first, second = ours_in.receive(10_000), ours_in.receive(10_000)
    assert (first.data(), second.data()) == (payload, payload[::-1])
    assert len(first.message_id()._chunk_ids) >= 2  # really chunked
    assert len(second.message_id()._chunk_ids) >= 2
    assert theirs_in.receive(10_000).data() == payload
    assert theirs_in.receive(10_000).data() == payload[::-1]

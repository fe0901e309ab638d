"""The throughput API of ``magnetar.client`` with the official client (pulsar-client 3.13) on
the same topics: batches written by ``send_batch`` (hand-encoded members) read by the official
consumer, and the official producer's batches (with keys, properties and event times) read
lazily by ``receive_batch`` and acknowledged as a whole."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from magnetar.client import InitialPosition, Timeout
from magnetar.client.sync import Client


def _topic(prefix: str = "tput") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def test_send_batch_read_by_the_official_consumer(official: pulsar.Client, ours: Client) -> None:
    topic = _topic()
    consumer = official.subscribe(topic, "sub")
    producer = ours.create_producer(topic, batching_max_messages=100)
    payloads = [b"x%d-" % i * (i % 50) for i in range(300)]
    ids = producer.send_batch(payloads)
    got = [consumer.receive(10_000) for _ in range(300)]
    assert [m.data() for m in got] == payloads
    for m, mid in zip(got, ids, strict=True):
        oid = m.message_id()
        assert (oid.ledger_id(), oid.entry_id(), oid.batch_index()) == (
            mid.ledger_id(),
            mid.entry_id(),
            mid.batch_index(),
        )
        consumer.acknowledge(m)
    consumer.close()
    producer.close()


def test_official_batches_read_lazily_and_acknowledged_whole(
    official: pulsar.Client, ours: Client
) -> None:
    topic = _topic()
    consumer = ours.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer = official.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(40):
        producer.send_async(
            b"o%d" % i,
            None,
            properties={"i": str(i)},
            partition_key="k",
            event_timestamp=7000 + i,
        )
    producer.flush()
    batches = []
    n = 0
    while n < 40:
        batch = consumer.receive_batch(timeout_millis=10_000)
        batches.append(batch)
        n += len(batch)
    assert any(b._members is not None for b in batches)  # handed out undecoded
    msgs = [m for b in batches for m in b]
    assert [m.data() for m in msgs] == [b"o%d" % i for i in range(40)]
    assert [m.properties() for m in msgs] == [{"i": str(i)} for i in range(40)]
    assert {m.partition_key() for m in msgs} == {"k"}
    assert [m.event_timestamp() for m in msgs] == [7000 + i for i in range(40)]
    for b in batches:
        consumer.acknowledge(b)
    consumer.close()
    again = ours.subscribe(topic, "sub")
    with pytest.raises(Timeout):
        again.receive_batch(timeout_millis=500)
    producer.close()

"""Delayed delivery through the subscription's ``DelayedDeliveryIndex``, seen by the official
Apache Pulsar Python client: Shared messages with ``deliver_after`` never arrive before they
are due, and on Key_Shared a due message is delivered (parked with its key, not stuck).

The broker is in-process (memory storage: the memory-backed index); the real-storage restart
case is ``tests/integration/broker/test_delayed_delivery_restart.py``.
"""

from __future__ import annotations

import datetime
import time
import uuid

import pulsar
import pytest
from support.broker import InProcessBroker

Shared = pulsar.ConsumerType.Shared
KeyShared = pulsar.ConsumerType.KeyShared


def _topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_shared_delayed_messages_arrive_no_earlier_than_due(
    broker: InProcessBroker, client: pulsar.Client
) -> None:
    topic = _topic("delay")
    consumer = client.subscribe(topic, "s", consumer_type=Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    due_at: dict[bytes, int] = {}
    for i, delay_ms in enumerate([3000, 1000, 2000, 1500]):
        name = f"d{i}".encode()
        due_at[name] = _now_ms() + delay_ms  # taken before send: the client's is later
        producer.send(name, deliver_after=datetime.timedelta(milliseconds=delay_ms))
    producer.send(b"now")
    got: dict[bytes, int] = {}
    for _ in range(5):
        m = consumer.receive(15_000)
        got[m.data()] = _now_ms()
        consumer.acknowledge(m)
    assert set(got) == {*due_at, b"now"}
    for name, at in due_at.items():
        assert got[name] >= at, (name, got[name] - at)
    assert got[b"now"] < min(got[n] for n in due_at)  # not held behind the delayed ones
    # the index held them (Pulsar's msgDelayed): it is empty now that all went out
    service = broker.service
    assert service is not None
    sub = service.topics[topic].subscriptions["s"]
    assert sub.delayed_index is not None and sub.delayed_index.size() == 0
    assert sub.delayed_index.statistics().added == 4


def test_key_shared_due_message_is_delivered_in_key_order_after_it(
    client: pulsar.Client,
) -> None:
    topic = _topic("ksdelay")
    consumer = client.subscribe(topic, "ks", consumer_type=KeyShared)
    producer = client.create_producer(topic, batching_enabled=False)
    t0 = _now_ms()
    producer.send(b"late", partition_key="k", deliver_after=datetime.timedelta(milliseconds=1500))
    producer.send(b"k1", partition_key="k")
    producer.send(b"j1", partition_key="j")
    got: list[tuple[bytes, int]] = []
    for _ in range(3):
        m = consumer.receive(15_000)
        got.append((m.data(), _now_ms()))
        consumer.acknowledge(m)
    names = [g[0] for g in got]
    assert sorted(names) == [b"j1", b"k1", b"late"]
    assert names[-1] == b"late"  # held, overtaken by its key (as Pulsar), then delivered
    assert got[-1][1] >= t0 + 1500
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)  # delivered once

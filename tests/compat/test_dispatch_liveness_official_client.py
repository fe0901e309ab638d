"""Dispatch liveness with the official client (pulsar-client 3.13): issue 12 §2 and §3.

Each test is one reported reproduction: consumers polled in turn from one thread with
``receive(timeout_millis=...)``, every message acknowledged, and every published message
must arrive (Key_Shared: the first deliveries of each key in publish order). The producers
block when their pending queue is full and every send's result is checked: with the
client's defaults (``max_pending_messages=1000``, ``block_if_queue_full=False``) a burst of
``send_async`` loses the sends past the queue with ``ProducerQueueIsFull``, which the
reports' callbacks did not look at, and those messages were never stored.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pulsar
from support.broker import InProcessBroker
from support.waiting import wait_until

from magnetar.broker.admin.topic_ops import TopicOperations

DEADLINE_S = 120  # a loaded machine; normally a few seconds


def _topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


class Results:
    """send_async callbacks: every result must be Ok."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.results: list[str] = []

    def callback(self, res: Any, _msg_id: Any) -> None:
        with self.lock:
            self.results.append(str(res))

    def check(self, n: int) -> None:

        def done() -> bool:
            with self.lock:
                return len(self.results) >= n

        wait_until(done, DEADLINE_S, f"{n} send results", interval_s=0.01)
        with self.lock:
            assert self.results.count("Result.Ok") == n, set(self.results)


class Poller:
    """Polls consumers in turn from this thread, acking everything; records the global
    order of deliveries as (index, consumer, payload)."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self.consumers: dict[str, pulsar.Consumer] = {}
        self.deliveries: list[tuple[int, str, str]] = []
        self.distinct: set[str] = set()

    def count(self, name: str) -> int:
        return sum(1 for _, who, _ in self.deliveries if who == name)

    def poll_until(self, pred: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not pred():
            assert time.monotonic() < deadline, (
                f"timed out waiting for {what}: {len(self.distinct)} distinct messages, "
                f"per consumer { {n: self.count(n) for n in self.consumers} }"
            )
            for name, consumer in list(self.consumers.items()):
                try:
                    msg = consumer.receive(timeout_millis=self.timeout_ms)
                except pulsar.Timeout:
                    continue
                data = msg.data().decode()
                self.deliveries.append((len(self.deliveries), name, data))
                self.distinct.add(data)
                consumer.acknowledge(msg)


def _stats(broker: InProcessBroker, topic: str) -> dict[str, Any]:
    service = broker.service
    assert service is not None
    return broker.call(lambda: TopicOperations(service).topic_stats(topic), timeout=60)  # type: ignore[no-any-return]


def _wait_backlog_zero(broker: InProcessBroker, topic: str, sub: str) -> dict[str, Any]:

    def drained() -> dict[str, Any] | None:
        stats: dict[str, Any] = _stats(broker, topic)["subscriptions"][sub]
        return stats if stats["msgBacklog"] == 0 else None

    return wait_until(drained, DEADLINE_S, f"no backlog on {sub}")


def _first_deliveries_in_key_order(poller: Poller) -> None:
    first: dict[tuple[str, int], int] = {}
    for index, _, data in poller.deliveries:
        key, seq = data.split(":")
        first.setdefault((key, int(seq)), index)
    per_key: dict[str, list[tuple[int, int]]] = {}
    for (key, seq), index in first.items():
        per_key.setdefault(key, []).append((index, seq))
    for key, seen in per_key.items():
        seqs = [seq for _, seq in sorted(seen)]
        assert seqs == sorted(seqs), f"{key}: first deliveries out of order"


def test_shared_batches_larger_than_the_receiver_queue_reach_every_consumer(
    broker: InProcessBroker, client: pulsar.Client
) -> None:
    """§2: three Shared consumers with receiver queue 10, batches of 1,000: each batch
    takes a consumer's permits to about -990; the third batch goes to the consumer that
    still has permits, and each consumer's permits come back as it consumes. At the end
    no consumer holds more permits than its queue (a batch charged as one message let a
    consumer's permits grow to about 980)."""
    topic = _topic("shared-batches")
    poller = Poller(timeout_ms=50)
    for i in range(3):
        poller.consumers[f"c{i}"] = client.subscribe(
            topic,
            "s",
            consumer_type=pulsar.ConsumerType.Shared,
            receiver_queue_size=10,
            consumer_name=f"c{i}",
        )
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=1000,
        block_if_queue_full=True,
    )
    results = Results()
    for i in range(3000):
        producer.send_async(f"m{i}".encode(), results.callback)
    producer.flush()
    results.check(3000)
    poller.poll_until(lambda: len(poller.distinct) == 3000, "all 3,000 messages")
    assert all(poller.count(name) > 0 for name in poller.consumers)
    stats = _wait_backlog_zero(broker, topic, "s")
    for c in stats["consumers"]:
        assert 0 < c["availablePermits"] <= 10, c


def test_key_shared_key_based_batches_three_consumers_deliver_everything(
    broker: InProcessBroker, client: pulsar.Client
) -> None:
    """§3 (a): three Key_Shared consumers (default queue), KEY_BASED batching, 3,000
    messages over 50 keys."""
    topic = _topic("ks-batches")
    poller = Poller(timeout_ms=10)
    for i in range(3):
        poller.consumers[f"c{i}"] = client.subscribe(
            topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=f"c{i}"
        )
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_type=pulsar.BatchingType.KeyBased,
        block_if_queue_full=True,
    )
    results = Results()
    for i in range(3000):
        key = f"k{i % 50}"
        producer.send_async(f"{key}:{i // 50}".encode(), results.callback, partition_key=key)
    producer.flush()
    results.check(3000)
    poller.poll_until(lambda: len(poller.distinct) == 3000, "all 3,000 messages")
    _first_deliveries_in_key_order(poller)
    stats = _wait_backlog_zero(broker, topic, "ks")
    for c in stats["consumers"]:
        assert 0 < c["availablePermits"] <= 1000, c


def test_key_shared_join_then_close_with_small_queues_delivers_everything(
    broker: InProcessBroker, client: pulsar.Client
) -> None:
    """§3 (b): two Key_Shared consumers with receiver queue 50, unbatched, 3,000 messages
    over 30 keys; a third joins after 300 messages, the first closes after 900."""
    topic = _topic("ks-churn")
    poller = Poller(timeout_ms=10)

    def join(name: str) -> None:
        poller.consumers[name] = client.subscribe(
            topic,
            "ks",
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=name,
            receiver_queue_size=50,
        )

    join("c0")
    join("c1")
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    results = Results()
    for i in range(3000):
        key = f"k{i % 30}"
        producer.send_async(f"{key}:{i // 30}".encode(), results.callback, partition_key=key)
    producer.flush()
    results.check(3000)
    poller.poll_until(lambda: len(poller.distinct) >= 300, "300 messages")
    join("c2")
    poller.poll_until(lambda: len(poller.distinct) >= 900, "900 messages")
    poller.consumers.pop("c0").close()
    poller.poll_until(lambda: len(poller.distinct) == 3000, "all 3,000 messages")
    _first_deliveries_in_key_order(poller)
    assert poller.count("c2") > 0
    stats = _wait_backlog_zero(broker, topic, "ks")
    assert sorted(c["consumerName"] for c in stats["consumers"]) == ["c1", "c2"]
    for c in stats["consumers"]:
        assert 0 < c["availablePermits"] <= 50, c

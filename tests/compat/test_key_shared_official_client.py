"""Key_Shared with the official client (pulsar-client 3.13) against our broker.

A keyed stream (KEY_BASED batching) over consumers that join, close, and one that is
SIGKILLed in a child process mid-stream: every message is delivered and acked, and for
each key the first deliveries come in publish order, across consumers and processes
(each delivery is stamped with CLOCK_MONOTONIC, which is one clock for all processes on
Linux; a key moves to another consumer only after the old one acked or lost its messages,
so the stamps of a key's first deliveries must follow its sequence numbers).
STICKY: overlapping ranges are refused with ConsumerAssignError.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest
from support.broker import InProcessBroker
from support.waiting import wait_until

from magnetar.broker.admin.topic_ops import TopicOperations

KeyShared = pulsar.ConsumerType.KeyShared

CHILD = r"""
import sys, time, pulsar
url, topic = sys.argv[1], sys.argv[2]
client = pulsar.Client(url, operation_timeout_seconds=5, log_conf_file_path=None)
consumer = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
                            consumer_name="child", receiver_queue_size=100)
print("ready", flush=True)
while True:
    try:
        msg = consumer.receive(200)
    except pulsar.Timeout:
        continue
    # report before acking: whatever the broker saw acked was reported
    print(f"got {time.monotonic_ns()} {msg.data().decode()}", flush=True)
    consumer.acknowledge(msg)
"""


def _topic() -> str:
    return f"persistent://public/default/ks-{uuid.uuid4().hex[:8]}"


class Deliveries:
    """(monotonic ns, key, seq, consumer) of every delivery, from threads and the child."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[tuple[int, str, int, str]] = []

    def add(self, ns: int, data: str, who: str) -> None:
        key, seq = data.split(":")
        with self.lock:
            self.records.append((ns, key, int(seq), who))

    def count(self, who: str | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.records if who is None or r[3] == who)

    def distinct(self) -> set[tuple[str, int]]:
        with self.lock:
            return {(r[1], r[2]) for r in self.records}


class Receiver:
    """Receive, record, then ack, on a thread, until stopped."""

    def __init__(self, consumer: pulsar.Consumer, name: str, log: Deliveries) -> None:
        self.consumer, self.name, self.log = consumer, name, log
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                msg = self.consumer.receive(100)
            except pulsar.Timeout:
                continue
            self.log.add(time.monotonic_ns(), msg.data().decode(), self.name)
            self.consumer.acknowledge(msg)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()


@pytest.fixture
def child_consumer(broker: InProcessBroker) -> Iterator[Callable[[str], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(topic: str) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, "-c", CHILD, broker.service_url, topic],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        procs.append(p)
        return p

    try:
        yield start
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
            if p.stdout is not None:
                p.stdout.close()


def test_key_shared_order_per_key_with_joins_closes_and_a_killed_consumer(
    broker: InProcessBroker, child_consumer: Callable[[str], subprocess.Popen[str]]
) -> None:
    topic = _topic()
    keys = [f"key-{i}" for i in range(30)]
    total = 3000
    log = Deliveries()
    client_a = pulsar.Client(
        broker.service_url, operation_timeout_seconds=5, log_conf_file_path=None
    )
    client_b = pulsar.Client(
        broker.service_url, operation_timeout_seconds=5, log_conf_file_path=None
    )
    receivers: list[Receiver] = []
    try:

        def consumer(client: pulsar.Client, name: str) -> Receiver:
            c = client.subscribe(
                topic, "ks", consumer_type=KeyShared, consumer_name=name, receiver_queue_size=100
            )
            r = Receiver(c, name, log)
            receivers.append(r)
            return r

        first = consumer(client_a, "a")
        child = child_consumer(topic)
        assert child.stdout is not None
        stdout = child.stdout
        ready = threading.Event()

        def read_child() -> None:  # the C++ client logs to stdout too: skip those lines
            for line in stdout:
                parts = line.split()
                if parts == ["ready"]:
                    ready.set()
                elif len(parts) == 3 and parts[0] == "got":
                    log.add(int(parts[1]), parts[2], "child")

        reader = threading.Thread(target=read_child, daemon=True)
        reader.start()
        wait_until(ready.is_set, 30, "the child consumer to subscribe")

        producer = client_a.create_producer(
            topic,
            batching_enabled=True,
            batching_type=pulsar.BatchingType.KeyBased,
            batching_max_messages=50,
            batching_max_publish_delay_ms=5,
        )
        seq = dict.fromkeys(keys, 0)

        def publish(n: int, *, flush: bool = True) -> None:
            for i in range(n):
                key = keys[(i * 7 + i // 13) % len(keys)]
                producer.send_async(f"{key}:{seq[key]}".encode(), None, partition_key=key)
                seq[key] += 1
            if flush:
                producer.flush()

        publish(1000)
        wait_until(lambda: log.count("child") >= 50, 30, "the child to receive")
        os.kill(child.pid, signal.SIGKILL)  # mid-stream, with messages in flight
        child.wait(10)
        # joins while messages are in flight: the keys that move must wait for them
        publish(500, flush=False)
        second = consumer(client_b, "b")
        publish(500, flush=False)
        third = consumer(client_a, "c")
        publish(500, flush=False)
        wait_until(lambda: log.count("c") >= 20, 30, "c to receive")
        third.close()  # graceful close mid-stream: its unacked messages move on
        receivers.remove(third)
        publish(500)
        wait_until(lambda: len(log.distinct()) == total, 60, "every message to be delivered")
        assert broker.service is not None
        service = broker.service

        def backlog() -> int:
            stats = broker.call(lambda: TopicOperations(service).topic_stats(topic))
            return int(stats["subscriptions"]["ks"]["msgBacklog"])

        wait_until(lambda: backlog() == 0, 30, "every message to be acked")
        assert first.thread.is_alive() and second.thread.is_alive()
    finally:
        for r in receivers:
            r.close()
        client_a.close()
        client_b.close()

    with log.lock:
        records = sorted(log.records)
    assert {(k, s) for _, k, s, _ in records} == {(k, s) for k in keys for s in range(seq[k])}
    assert sum(seq.values()) == total
    first_delivery: dict[tuple[str, int], tuple[int, str]] = {}
    for ns, key, s, who in records:
        first_delivery.setdefault((key, s), (ns, who))
    movers = set()
    for key in keys:
        order = sorted(range(seq[key]), key=lambda s, k=key: first_delivery[(k, s)][0])
        assert order == list(range(seq[key])), f"{key}: first deliveries out of order"
        movers |= {first_delivery[(key, s)][1] for s in range(seq[key])}
    assert {"a", "b", "child"} <= movers  # keys really were spread and moved


def test_sticky_overlapping_ranges_are_refused(broker: InProcessBroker) -> None:
    topic = _topic()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5, log_conf_file_path=None)
    try:

        def sticky(name: str, ranges: list[tuple[int, int]]) -> pulsar.Consumer:
            policy = pulsar.ConsumerKeySharedPolicy(
                key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=ranges
            )
            return client.subscribe(
                topic,
                "sticky",
                consumer_type=KeyShared,
                consumer_name=name,
                key_shared_policy=policy,
            )

        low = sticky("low", [(0, 32767)])
        with pytest.raises(pulsar.ConsumerAssignError):
            sticky("overlap", [(30000, 65535)])
        high = sticky("high", [(32768, 65535)])  # the disjoint rest is accepted
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(40):
            producer.send(f"m{i}".encode(), partition_key=f"k{i}")
        got: dict[str, set[str]] = {"low": set(), "high": set()}
        for name, c in (("low", low), ("high", high)):
            while True:
                try:
                    msg = c.receive(500)
                except pulsar.Timeout:
                    break
                got[name].add(msg.partition_key())
                c.acknowledge(msg)
        assert len(got["low"]) + len(got["high"]) == 40
        assert got["low"] and got["high"] and not (got["low"] & got["high"])
    finally:
        client.close()


def test_key_shared_policy_mismatch_is_refused(broker: InProcessBroker) -> None:
    topic = _topic()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5, log_conf_file_path=None)
    try:
        client.subscribe(topic, "ks", consumer_type=KeyShared)
        relaxed = pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=True)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "ks", consumer_type=KeyShared, key_shared_policy=relaxed)
    finally:
        client.close()

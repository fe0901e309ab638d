"""SIGKILL and restart a real ``magnetar standalone`` under load, with the official client.

Proves issue 4 §3: with durable subscriptions, no acknowledged publish is lost and no
acknowledged message is delivered again after the restart.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pulsar
from support.standalone import StandaloneFactory
from support.waiting import wait_until

TOPIC = "persistent://public/default/restart-durability"
SUB = "durable-sub"


def _backlog(web_url: str) -> int:
    url = f"{web_url}/admin/v2/persistent/public/default/restart-durability/stats"
    with urllib.request.urlopen(url, timeout=5) as r:
        stats = json.loads(r.read())
    return int(stats["subscriptions"][SUB]["msgBacklog"])


def test_sigkill_restart_loses_no_acknowledged_publish_and_redelivers_no_ack(
    standalone_factory: StandaloneFactory,
) -> None:
    sa = standalone_factory.create().start()
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    consumer = client.subscribe(
        TOPIC,
        SUB,
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=3000)
    published: set[bytes] = set()
    for i in range(200):
        payload = f"before-{i}".encode()
        producer.send(payload)
        published.add(payload)

    acked: set[bytes] = set()
    for _ in range(120):
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        acked.add(msg.data())
    wait_until(lambda: _backlog(sa.web_url) == 80, 20, "the broker to apply 120 acks")

    # Keep publishing while the whole standalone (broker + bookie) is SIGKILLed.
    stop = threading.Event()
    during: set[bytes] = set()

    def publish_until_failure() -> None:
        i = 0
        while not stop.is_set():
            payload = f"during-{i}".encode()
            try:
                producer.send(payload)
            except Exception:
                return
            during.add(payload)
            i += 1

    thread = threading.Thread(target=publish_until_failure)
    thread.start()
    wait_until(lambda: len(during) >= 50, 30, "50 publishes under load")
    sa.kill()
    stop.set()
    thread.join(30)
    client.close()

    sa.start()
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    consumer = client.subscribe(
        TOPIC,
        SUB,
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    must_arrive = (published - acked) | during
    received: list[bytes] = []
    deadline = time.monotonic() + 120
    while not must_arrive.issubset(received) and time.monotonic() < deadline:
        try:
            msg = consumer.receive(2_000)
        except pulsar.Timeout:
            continue
        received.append(msg.data())
        consumer.acknowledge(msg)
    # Whatever else is still queued (publishes whose receipt never came) may arrive too.
    while True:
        try:
            msg = consumer.receive(1_000)
        except pulsar.Timeout:
            break
        received.append(msg.data())
    client.close()

    missing = must_arrive - set(received)
    assert not missing, f"{len(missing)} acknowledged publishes lost, e.g. {sorted(missing)[:5]}"
    redelivered = acked & set(received)
    assert not redelivered, f"acknowledged messages delivered again: {sorted(redelivered)[:5]}"
    assert len(received) == len(set(received)), "a message was delivered twice"

"""REACHED_END_OF_TOPIC on a real standalone: a consumer of a terminated topic hears it once
everything stored is acknowledged on its subscription (``magnetar.client``'s
``has_reached_end_of_topic()``, Java's ``hasReachedEndOfTopic``), not before; the official
client, whose C++ core closes the connection on that command, is never sent it and stays
connected (it used to reconnect in a loop when it was)."""

from __future__ import annotations

import pulsar
from support.admin import http
from support.standalone import StandaloneProcess
from support.waiting import wait_for, wait_until

from magnetar.client import Client, InitialPosition

T = "/admin/v2/persistent/public/default"


def _subscription(server: StandaloneProcess, local: str, sub: str) -> dict:
    status, data = http(server.web_url, "GET", f"{T}/{local}/stats")
    assert status == 200, data
    return data["subscriptions"][sub]


async def test_reached_end_of_topic_once_everything_is_acknowledged(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    local = "end-of-topic"
    topic = f"persistent://public/default/{local}"
    official = client.subscribe(topic, "official", initial_position=pulsar.InitialPosition.Earliest)
    ours = Client(server.service_url, operation_timeout_seconds=30)
    try:
        consumer = await ours.subscribe(topic, "ours", initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(f"m{i}".encode())
        for _ in range(3):
            official.acknowledge(official.receive(30_000))
        wait_until(lambda: _subscription(server, local, "official")["msgBacklog"] == 0, 30)
        since = [c["connectedSince"] for c in _subscription(server, local, "official")["consumers"]]
        got = [await consumer.receive() for _ in range(3)]
        for msg in got[:2]:
            await consumer.acknowledge(msg)
        status, _ = http(server.web_url, "POST", f"{T}/{local}/terminate")
        assert status == 200
        assert not consumer.has_reached_end_of_topic()  # one message is still unacknowledged
        await consumer.acknowledge(got[2])
        await wait_for(consumer.has_reached_end_of_topic, 30)
        # the official consumer was told nothing and kept its connection
        assert official.get_last_message_id() is not None
        assert official.is_connected()
        now = [c["connectedSince"] for c in _subscription(server, local, "official")["consumers"]]
        assert now == since
        await consumer.close()
    finally:
        await ours.close()

"""The image's standalone role in one container: serves the official client, ``docker stop``
exits 0, and a new container on the same volume has the data."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from support.containers import drain, free_ports
from support.waiting import wait_until


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@pytest.fixture
def volume(engine: Any) -> Iterator[str]:
    name = f"mt-standalone-{uuid.uuid4().hex[:8]}"
    engine.volumes.create(name)
    try:
        yield name
    finally:
        for container in engine.containers.list(all=True, filters={"volume": name}):
            container.remove(force=True, v=True)
        engine.volumes.get(name).remove(force=True)


def test_standalone_container_keeps_its_data_on_the_volume(
    engine: Any, images: dict[str, str], volume: str
) -> None:
    port, web, bookie = free_ports(3)
    command = [
        "standalone", "--data-dir", "/data/standalone", "--port", str(port),
        "--web-port", str(web), "--bookie-port", str(bookie), "--advertised-address", "127.0.0.1",
    ]  # fmt: skip

    def run() -> Any:
        container = engine.containers.run(
            images["magnetar"],
            command,
            detach=True,
            network_mode="host",
            volumes={volume: {"bind": "/data", "mode": "rw"}},
            labels={"io.magnetar.test": "standalone"},
        )
        wait_until(
            lambda: _healthy(f"http://127.0.0.1:{web}/admin/v2/brokers/health"),
            120,
            "the standalone container",
        )
        return container

    topic = f"persistent://public/default/standalone-{uuid.uuid4().hex[:8]}"
    sent = [f"s-{i}".encode() for i in range(100)]
    first = run()
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for payload in sent:
            producer.send(payload)
    finally:
        client.close()
    first.stop(timeout=30)
    first.reload()
    assert first.attrs["State"]["ExitCode"] == 0, first.logs(tail=30).decode(errors="replace")
    first.remove(v=True)

    second = run()
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(topic, "s")  # the durable subscription, its backlog
        assert drain(consumer, sent, 60) == set()
    finally:
        client.close()
        second.stop(timeout=30)
        second.reload()
        assert second.attrs["State"]["ExitCode"] == 0

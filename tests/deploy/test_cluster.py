"""A cluster of containers (1 ZooKeeper, 3 bookies, 2 brokers) on a real Docker engine,
driven by the official pulsar-client: produce/consume, ``docker kill`` of a bookie and of
a broker under load (nothing acknowledged lost, service resumes), ``docker stop`` exits 0
within the grace period, a bookie's volume survives re-creating its container."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from support.containers import drain, free_ports
from support.waiting import wait_until

from magnetar.launcher import LABEL_CLUSTER, Launcher


class Load:
    """A producer thread sending numbered messages; ``acked`` holds every acknowledged one."""

    def __init__(self, client: pulsar.Client, topic: str) -> None:
        self.producer = client.create_producer(
            topic, send_timeout_millis=120_000, batching_enabled=False
        )
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            payload = f"m-{i}".encode()
            try:
                self.producer.send(payload)
                self.acked.append(payload)
            except Exception as exc:  # a send that timed out was not acknowledged
                self.errors.append(repr(exc))
            i += 1

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(180)
        self.producer.close()

    def wait_acked(self, count: int, timeout_s: float = 120) -> None:
        wait_until(lambda: len(self.acked) >= count, timeout_s, f"{count} acknowledged sends")


@pytest.fixture
def client(cluster: Launcher) -> Iterator[pulsar.Client]:
    c = pulsar.Client(cluster.spec.service_url, operation_timeout_seconds=60)
    try:
        yield c
    finally:
        c.close()


def _topic() -> str:
    return f"persistent://public/default/deploy-{uuid.uuid4().hex[:8]}"


def _http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _add_batches(cluster: Launcher, index: int, metric: str = "bookkeeper_server_ADD_BATCH") -> int:
    port = cluster.spec.bookie_http_ports[index]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return -1
    match = re.search(rf"^{metric}_count\S* (\d+(?:\.\d+)?)", text, re.M)
    return int(float(match.group(1))) if match else 0


def _restart(cluster: Launcher, name: str, member: Any) -> None:
    cluster.container(name).start()
    cluster.wait_healthy(member, 180)


# -- the tests ---------------------------------------------------------------------------------


def test_images_are_lean_non_root_with_a_healthcheck(engine: Any, images: dict[str, str]) -> None:
    image = engine.images.get(images["magnetar"])
    config = image.attrs["Config"]
    assert config["User"] == "magnetar:magnetar"
    assert config["Healthcheck"]["Test"] == ["CMD", "magnetar", "healthcheck"]
    assert "/data" in (config.get("Volumes") or {})
    size_mb = image.attrs["Size"] / 1e6
    print(f"\nimage sizes: magnetar {size_mb:.0f} MB, ", end="")
    assert size_mb < 400, f"magnetar image is {size_mb:.0f} MB"
    zk = engine.images.get(images["zookeeper"])
    print(f"magnetar-zookeeper {zk.attrs['Size'] / 1e6:.0f} MB")
    assert zk.attrs["Config"]["User"] == "zookeeper"


def test_cluster_is_up_initialised_and_healthy(cluster: Launcher) -> None:
    rows = cluster.status()
    assert sorted(r["role"] for r in rows) == ["bookie"] * 3 + ["broker"] * 2 + ["zookeeper"]
    assert all(r["status"] == "running" and r["answers"] for r in rows), rows
    web = cluster.spec.web_urls()[0]
    assert cluster.spec.name in _http_json(f"{web}/admin/v2/clusters")
    assert "public/default" in _http_json(f"{web}/admin/v2/namespaces/public")
    # Docker's own HEALTHCHECK (magnetar healthcheck in the container) agrees.
    wait_until(
        lambda: all(r["health"] == "healthy" for r in cluster.status()),
        120,
        "every container's HEALTHCHECK to pass",
    )


def test_produce_and_consume_through_both_brokers(cluster: Launcher, client: pulsar.Client) -> None:
    topics = [_topic() for _ in range(4)]  # bundles spread over both brokers
    for topic in topics:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        sent = [f"{topic}-{i}".encode() for i in range(50)]
        for payload in sent:
            producer.send(payload)
        assert drain(consumer, sent, 60) == set()
        producer.close()
        consumer.close()
    owners = {
        _http_json(f"{cluster.spec.web_urls()[0]}/lookup/v2/topic/{t.replace('://', '/')}")[
            "brokerUrl"
        ]
        for t in topics
    }
    assert owners <= set(cluster.spec.service_urls())
    # the launcher gave the bookies fast add ports and the brokers add over them
    bookies = range(len(cluster.spec.bookie_ports))
    assert sum(_add_batches(cluster, i, "bookie_fast_add_BATCH") for i in bookies) > 0


def test_docker_kill_of_a_bookie_under_load_loses_nothing_acknowledged(
    cluster: Launcher, client: pulsar.Client
) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    bookies = range(len(cluster.spec.bookie_ports))
    with Load(client, topic) as load:
        load.wait_acked(100)
        before = {i: _add_batches(cluster, i) for i in bookies}
        load.wait_acked(len(load.acked) + 100)
        busy = [i for i in bookies if _add_batches(cluster, i) > before[i]]
        assert busy, "no bookie took adds"
        victim = busy[0]  # in the ensemble being written
        name = cluster.spec.bookie(victim)
        cluster.container(name).kill()
        killed_at = len(load.acked)
        # The writers replace the dead bookie (ensemble change): sends keep being acknowledged.
        load.wait_acked(killed_at + 200, timeout_s=180)
    assert drain(consumer, load.acked) == set()
    consumer.close()
    _restart(cluster, name, cluster.spec.bookie_container(victim))


def test_docker_kill_of_a_broker_under_load_loses_nothing_acknowledged(
    cluster: Launcher, client: pulsar.Client
) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    web = cluster.spec.web_urls()[0]
    owner = _http_json(f"{web}/lookup/v2/topic/{topic.replace('://', '/')}")["brokerUrl"]
    victim = cluster.spec.service_urls().index(owner)
    name = cluster.spec.broker(victim)
    with Load(client, topic) as load:
        load.wait_acked(200)
        cluster.container(name).kill()
        killed_at = len(load.acked)
        # The other broker takes the bundle once the dead one's session expires; the
        # client reconnects through it and the producer resends what was pending.
        load.wait_acked(killed_at + 200, timeout_s=180)
    assert drain(consumer, load.acked) == set()
    consumer.close()
    _restart(cluster, name, cluster.spec.broker_container(victim))


@pytest.mark.parametrize("role", ["broker", "bookie", "zookeeper"])
def test_docker_stop_exits_0_within_the_grace_period(cluster: Launcher, role: str) -> None:
    spec = cluster.spec
    member = {
        "broker": spec.broker_container(1),
        "bookie": spec.bookie_container(2),
        "zookeeper": spec.zookeeper_container(),
    }[role]
    container = cluster.container(member.name)
    container.stop(timeout=spec.stop_timeout_s)  # SIGTERM, SIGKILL after the grace period
    container.reload()
    state = container.attrs["State"]
    # 137 would mean the grace period ran out and Docker sent SIGKILL.
    assert (state["Status"], state["ExitCode"], state["OOMKilled"]) == ("exited", 0, False), (
        container.logs(tail=30).decode(errors="replace")
    )
    _restart(cluster, member.name, member)


def test_a_bookie_volume_survives_recreating_its_container(
    cluster: Launcher, client: pulsar.Client, engine: Any
) -> None:
    spec = cluster.spec
    topic = _topic()
    producer = client.create_producer(topic)
    sent = [f"kept-{i}".encode() for i in range(100)]
    for payload in sent:
        producer.send(payload)
    producer.close()
    # Every bookie that took adds keeps them on its volume; re-create all three one by one
    # (a bookie whose data were lost would refuse to start: its cookie would not match).
    for index in range(len(spec.bookie_ports)):
        member = spec.bookie_container(index)
        old = cluster.container(member.name)
        old_id = old.id
        old.stop(timeout=spec.stop_timeout_s)
        old.remove(v=True)
        assert spec.volume(member.name) in [v.name for v in engine.volumes.list()]
        cluster.start_member(member, 180)
        assert cluster.container(member.name).id != old_id
    # Read from the bookies: a new subscription from the earliest message, after the owner
    # dropped its cache by unloading the topic.
    path = topic.replace("://", "/")
    lookup: dict[str, Any] = {}

    def looked_up() -> bool:
        # the brokers may still be reconnecting to ZooKeeper (restarted by an earlier test):
        # the lookup answers 503 until then
        try:
            lookup.update(_http_json(f"{spec.web_urls()[0]}/lookup/v2/topic/{path}"))
        except urllib.error.HTTPError as exc:
            if exc.code != 503:
                raise
        return "httpUrl" in lookup

    wait_until(looked_up, 120, "a lookup of the topic")
    owner = lookup["httpUrl"]
    req = urllib.request.Request(f"{owner}/admin/v2/{path}/unload", method="PUT")
    with urllib.request.urlopen(req, timeout=60):
        pass
    consumer = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    assert drain(consumer, sent, 120) == set()
    consumer.close()
    labels = {c.labels.get(LABEL_CLUSTER) for c in cluster.containers()}
    assert labels == {spec.name}


def test_cluster_command_reports_a_missing_image_without_a_traceback(engine: Any) -> None:
    import subprocess
    import sys

    name = f"mt-missing-{uuid.uuid4().hex[:6]}"
    cmd = [sys.executable, "-m", "magnetar.broker.cli", "cluster"]
    result = subprocess.run(
        [*cmd, "up", "--name", name, "--zookeeper-image", "magnetar-no-such-image:0",
         "--zookeeper-port", str(free_ports(1)[0])],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    try:
        assert result.returncode == 1
        assert "magnetar cluster: ImageNotFound" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        subprocess.run([*cmd, "down", "--name", name, "--volumes"], timeout=120, check=False)

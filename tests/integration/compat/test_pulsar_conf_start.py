"""A Pulsar user's own configuration starts Magnetar: ``magnetar standalone --config`` of
Pulsar's shipped ``standalone.conf`` and ``magnetar broker --config`` of its ``broker.conf``
(with ZooKeeper and two bookies), each then serving the official client; the keys accepted
without a setting of their own are logged once at start, with why.

Only the command line (ports, addresses) and, for the cluster broker, a line setting the bind
address to loopback are added to the shipped files (tests/support/pulsar_conf.py).
"""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Iterator

import pulsar
import pytest
from support import pulsar_conf
from support.admin import http
from support.bookies import BookieFactory
from support.cluster import Cluster, running_cluster
from support.standalone import StandaloneFactory
from support.zookeeper import ZooKeeperServer

from magnetar.broker.admin.http_api import TOPIC_POLICIES_DISABLED

pytestmark = pytest.mark.compat

DATA = pulsar_conf.materialize(pathlib.Path(tempfile.mkdtemp(prefix="pulsar-conf-")))


def shipped(name: str, dest: pathlib.Path, extra: str = "") -> pathlib.Path:
    """The shipped file at ``dest`` (``extra`` lines appended)."""
    dest.write_text((DATA / name).read_text() + extra)
    return dest


def round_trip(service_url: str, topic: str) -> None:
    client = pulsar.Client(service_url, operation_timeout_seconds=30, log_conf_file_path=None)
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"m{i}".encode())
        got = []
        for _ in range(10):
            msg = consumer.receive(10_000)
            got.append(msg.data().decode())
            consumer.acknowledge(msg)
        assert got == [f"m{i}" for i in range(10)]
    finally:
        client.close()


def test_pulsar_standalone_conf_starts_a_standalone(
    standalone_factory: StandaloneFactory, tmp_path: pathlib.Path
) -> None:
    conf = shipped("standalone.conf", tmp_path / "standalone.conf")
    node = standalone_factory.create(
        extra_args=["--config", str(conf), "--bind-address", "127.0.0.1"]
    ).start(timeout_s=90)
    try:
        round_trip(node.service_url, "persistent://public/default/from-standalone-conf")
        log = node.log_path.read_text(errors="replace")
        assert "numIOThreads=(default) accepted without a setting of its own" in log
        assert "subscriptionKeySharedUseConsistentHashing=true accepted" in log
        warning = [line for line in log.splitlines() if "webSocketServiceEnabled=true" in line]
        assert len(warning) == 1 and "WARNING" in warning[0], warning
    finally:
        node.stop()


def test_pulsar_client_python_ssl_conf_keys_start_a_standalone(
    standalone_factory: StandaloneFactory, tmp_path: pathlib.Path
) -> None:
    """The 33 keys the issue found refused, as Pulsar's Python client's test suite sets them
    (its TLS and authentication lines left out: they name files of that project)."""
    dropped = ("tls", "authentication", "authorization", "anonymousUserRole", "tokenSecretKey")
    dropped += ("superUserRoles", "brokerServicePortTls", "webServicePortTls", "bindAddress")
    lines = [
        line
        for line in (DATA / "standalone-ssl.conf").read_text().splitlines(keepends=True)
        if not line.startswith(dropped)
    ]
    conf = shipped("standalone.conf", tmp_path / "ssl.conf", "".join(lines))
    node = standalone_factory.create(extra_args=["--config", str(conf)]).start(timeout_s=90)
    try:
        round_trip(node.service_url, "persistent://public/default/from-ssl-conf")
        # topicLevelPoliciesEnabled=false: the topic-level policy endpoints answer 405
        topic = "/admin/v2/persistent/public/default/from-ssl-conf"
        status, body = http(node.web_url, "POST", topic + "/messageTTL", 60)
        assert (status, body["reason"]) == (405, TOPIC_POLICIES_DISABLED)
        assert http(node.web_url, "GET", topic + "/backlogQuotaMap")[0] == 405
        assert (
            http(node.web_url, "POST", "/admin/v2/namespaces/public/default/messageTTL", 60)[0]
            == 204
        )
    finally:
        node.stop()


@pytest.fixture
def cluster(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> Iterator[Cluster]:
    with running_cluster(zookeeper_server, bookie_factory, tmp_path, bookies=2) as c:
        yield c


def test_pulsar_broker_conf_starts_a_cluster_broker(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    conf = shipped("broker.conf", tmp_path / "broker-conf-body", "bindAddress=127.0.0.1\n")
    broker = cluster.start_broker(extra_config=conf.read_text())
    round_trip(broker.service_url, "persistent://public/default/from-broker-conf")
    log = broker.log_text()
    assert "loadManagerClassName=org.apache.pulsar.broker.loadbalance.impl.Modular" in log
    assert "brokerDeleteInactiveTopicsEnabled=true accepted" not in log  # implemented

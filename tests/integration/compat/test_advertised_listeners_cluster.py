"""Advertised listeners across a real two-broker cluster (ZooKeeper, two bookies, two broker
processes). Each broker has an ``internal`` and an ``external`` listener, each behind its own
TCP forwarder (as two networks would be): the official client with
``listener_name="external"`` is given one broker's external address, and every topic,
whichever broker the leader places it on, is reached through its owner's external address,
the redirects between brokers included; the client never uses an internal address. Any
broker answers an HTTP lookup with the owner's listener URL, and an unknown listener fails."""

from __future__ import annotations

import json
import pathlib
import urllib.error
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest
from support.bookies import BookieFactory
from support.broker_process import DEFAULT_CONFIG, BrokerProcess
from support.cluster import Cluster
from support.net import free_port
from support.tcp_forwarder import TcpForwarder
from support.waiting import wait_until
from support.zookeeper import ZooKeeperServer

Brokers = dict[str, tuple[BrokerProcess, TcpForwarder, TcpForwarder]]
"""name -> (broker, its internal forwarder, its external forwarder)"""


@pytest.fixture
def cluster(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> Iterator[tuple[Cluster, Brokers]]:
    made: list[BrokerProcess] = []
    brokers: Brokers = {}
    c = Cluster(zookeeper_server, bookie_factory, tmp_path, made)
    try:
        c.start_bookies(2)
        for i in range(2):
            b = BrokerProcess(tmp_path, f"broker-{i + 1}", c.metadata)
            internal = TcpForwarder(free_port(), ("127.0.0.1", b.port))
            external = TcpForwarder(free_port(), ("127.0.0.1", b.port))
            brokers[b.name] = (b, internal, external)
            (tmp_path / f"{b.name}.conf").write_text(
                DEFAULT_CONFIG
                + "metadata_store_session_timeout_millis=30000\n"
                + f"advertisedListeners=internal:pulsar://127.0.0.1:{internal.port},"
                + f"external:pulsar://127.0.0.1:{external.port}\n"
                + "internalListenerName=internal\n"
            )
            made.append(b)
            b.start()
        yield c, brokers
    finally:
        c.close_clients()
        for b in made:
            b.kill()
        for _, internal, external in brokers.values():
            internal.close()
            external.close()


def _get(url: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_every_owner_is_reached_through_its_external_listener(
    cluster: tuple[Cluster, Brokers],
) -> None:
    c, brokers = cluster
    first, _, first_external = brokers["broker-1"]
    first.admin("PUT", "/admin/v2/namespaces/public/ext", {"bundles": {"numBundles": 16}})
    wait_until(
        lambda: len(json.loads(first.admin("GET", "/admin/v2/brokers/test"))) == 2,
        60,
        "two load reports",
    )
    internal_used = {name: internal.used for name, (_, internal, _) in brokers.items()}
    client = pulsar.Client(
        f"pulsar://127.0.0.1:{first_external.port}",
        operation_timeout_seconds=60,
        listener_name="external",
        log_conf_file_path=None,
    )
    c.clients.append(client)
    topics = [f"persistent://public/ext/t{i}" for i in range(12)]
    for t in topics:
        client.create_producer(t, batching_enabled=False).send(b"x")
    by_internal_url = {
        f"pulsar://127.0.0.1:{internal.port}": name for name, (_, internal, _) in brokers.items()
    }
    owners = {}
    for t in topics:
        status, body = _get(f"{first.web_url}/lookup/v2/topic/{t.replace('://', '/')}")
        assert status == 200
        owners[t] = by_internal_url[body["brokerUrl"]]
    assert set(owners.values()) == set(brokers), "the leader placed topics on both brokers"
    for name, (_, internal, external) in brokers.items():
        assert external.used > 0, f"{name} was reached through its external listener"
        assert internal.used == internal_used[name], f"the client used {name}'s internal URL"
    for t, owner in owners.items():
        path = t.replace("://", "/")
        for asked, _, _ in brokers.values():
            status, body = _get(f"{asked.web_url}/lookup/v2/topic/{path}?listenerName=external")
            assert status == 200
            assert body["brokerUrl"] == f"pulsar://127.0.0.1:{brokers[owner][2].port}"
            status, body = _get(f"{asked.web_url}/lookup/v2/topic/{path}?listenerName=nope")
            assert (status, body.get("reason")) == (500, "the broker do not have nope listener")

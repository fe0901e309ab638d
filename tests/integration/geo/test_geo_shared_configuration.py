"""Two clusters of one instance sharing a configuration store (Pulsar's global ZooKeeper):
real ZooKeeper, a bookie and two ``magnetar broker`` processes per cluster, each cluster
initialised with ``magnetar zookeeper-init --configuration-metadata-store``. Clusters,
tenants, namespace policies and partitioned-topic metadata exist once for both; bundle
ownership, bookies and managed ledgers stay in each cluster's local store; the namespace,
replicated to both, is replicated between them (each cluster's owner broker runs the
replicator, reaching the other cluster through its list of brokers), and its replicator
follows the topic when its bundle is unloaded."""

from __future__ import annotations

import json
import uuid

import pulsar
from support.admin import http
from support.geo import SharedConfiguration


def test_one_configuration_two_local_stores(geo_shared_configuration: SharedConfiguration) -> None:
    geo = geo_shared_configuration
    east, west = geo["east"], geo["west"]
    # the clusters, registered once by zookeeper-init, seen from every broker
    for cluster in (east, west):
        for url in cluster.web_urls:
            status, names = http(url, "GET", "/admin/v2/clusters")
            assert status == 200 and sorted(names) == ["east", "west"]
    assert east.ok("GET", "/admin/v2/clusters/west")["brokerServiceUrl"] == west.service_url
    # the second cluster's init joined the public tenant and public/default, as Pulsar's does
    assert sorted(west.ok("GET", "/admin/v2/tenants/public")["allowedClusters"]) == [
        "east",
        "west",
    ]
    assert east.ok("GET", "/admin/v2/namespaces/public/default/replication") == ["east", "west"]
    # tenants and policies made through one cluster are the other's too
    tenant = f"t{uuid.uuid4().hex[:6]}"
    east.ok("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["east", "west"]})
    east.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns")
    west.ok("POST", f"/admin/v2/namespaces/{tenant}/ns/replication", ["east", "west"])
    west.ok("POST", f"/admin/v2/namespaces/{tenant}/ns/messageTTL", 3600)
    assert east.ok("GET", f"/admin/v2/namespaces/{tenant}/ns/replication") == ["east", "west"]
    assert east.ok("GET", f"/admin/v2/namespaces/{tenant}/ns/messageTTL") == 3600
    east.ok("PUT", f"/admin/v2/persistent/{tenant}/ns/parts/partitions", 3)
    assert west.ok("GET", f"/admin/v2/persistent/{tenant}/ns/parts/partitions")["partitions"] == 3
    # bookies are each cluster's own
    east_bookies = json.dumps(east.ok("GET", "/admin/v2/bookies/all"))
    west_bookies = json.dumps(west.ok("GET", "/admin/v2/bookies/all"))
    east_ids = {b.address for b in geo.bookies.bookies[: geo.bookies_per_cluster]}
    west_ids = {b.address for b in geo.bookies.bookies[geo.bookies_per_cluster :]}
    assert all(i in east_bookies and i not in west_bookies for i in east_ids)
    assert all(i in west_bookies and i not in east_bookies for i in west_ids)
    # each cluster serves the topic from its own brokers and its own storage, and
    # replicates it to the other: each consumer gets both clusters' messages, once
    topic = f"persistent://{tenant}/ns/orders"
    clients = {
        c.name: pulsar.Client(c.service_url, operation_timeout_seconds=30) for c in (east, west)
    }
    try:
        consumers = {
            name: c.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            for name, c in clients.items()
        }
        for cluster in (east, west):
            owner = cluster.ok("GET", f"/lookup/v2/topic/persistent/{tenant}/ns/orders")[
                "brokerUrl"
            ]
            assert owner.removeprefix("pulsar://") in cluster.service_url
        producers = {name: c.create_producer(topic) for name, c in clients.items()}
        sent = []
        for name, producer in producers.items():
            for i in range(5):
                producer.send(f"{name}-{i}".encode())
                sent.append(f"{name}-{i}".encode())
        for producer in producers.values():
            producer.send(b"barrier")
        for name, consumer in consumers.items():
            got, barriers = [], 0
            while barriers < 2:
                m = consumer.receive(30_000)
                consumer.acknowledge(m)
                if m.data() == b"barrier":
                    barriers += 1
                else:
                    got.append(m.data())
            assert sorted(got) == sorted(sent), (name, got)
        looked = east.ok("GET", f"/lookup/v2/topic/persistent/{tenant}/ns/orders")
        status, stats = http(
            looked["httpUrl"], "GET", f"/admin/v2/persistent/{tenant}/ns/orders/stats"
        )
        assert status == 200 and stats["replication"]["west"]["connected"] is True
        # the topic moves in east (its bundles unloaded mid-stream): its replicator follows
        # it to the next owner, which sends again from the cursor; west stores nothing twice
        more = [f"moved-{i}".encode() for i in range(300)]
        for i, body in enumerate(more):
            producers["east"].send_async(body, None)
            if i == 100:
                east.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns/unload")
        producers["east"].flush()
        producers["east"].send(b"barrier")
        got, barriers = [], 0
        while barriers < 1:
            m = consumers["west"].receive(30_000)
            consumers["west"].acknowledge(m)
            if m.data() == b"barrier":
                barriers += 1
            else:
                got.append(m.data())
        assert got == more
    finally:
        for c in clients.values():
            c.close()

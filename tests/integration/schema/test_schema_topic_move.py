"""Schemas follow a topic from one broker to another: a real cluster (ZooKeeper, two bookie
processes, two ``magnetar broker`` processes) and the official client. The registry lives in
ledgers and ZooKeeper, so the new owner answers with the same versions and refuses the same
incompatible schemas."""

from __future__ import annotations

import json
import pathlib
import struct
from collections.abc import Iterator

import pulsar
import pytest
from pulsar.schema import AvroSchema
from support.bookies import BookieFactory
from support.cluster import Cluster, running_cluster
from support.zookeeper import ZooKeeperServer

V1 = {"type": "record", "name": "P", "fields": [{"name": "name", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "P",
    "fields": [{"name": "name", "type": "string"}, {"name": "n", "type": "int", "default": 0}],
}
ONE_COPY = (
    "managed_ledger_default_ensemble_size=1\n"
    "managed_ledger_default_write_quorum=1\n"
    "managed_ledger_default_ack_quorum=1\n"
)
"""One copy per ledger: a bookie slowed by a loaded machine is replaced by the other one
(with two copies on two bookies there is no replacement and writes fail); this test is about
schemas moving with a topic, not about replication."""
BREAKS_FULL = {"type": "record", "name": "P", "fields": [{"name": "n", "type": "int"}]}


@pytest.fixture
def cluster(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> Iterator[Cluster]:
    with running_cluster(zookeeper_server, bookie_factory, tmp_path) as c:
        yield c


def test_schemas_move_with_their_topic(cluster: Cluster) -> None:
    brokers = [cluster.start_broker(ONE_COPY) for _ in range(2)]
    topic = "persistent://public/default/moving-schema"
    client = cluster.client(brokers[0].service_url, 60)
    p1 = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1))
    p1.send({"name": "a"})
    p2 = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V2))
    p2.send({"name": "b", "n": 1})
    p1.close()
    p2.close()
    owner = cluster.owner(topic)
    other = next(b for b in brokers if b is not owner)
    owner.stop()
    # the surviving broker takes the topic and knows its schemas
    survivor = cluster.client(other.service_url, 60)
    with pytest.raises(pulsar.IncompatibleSchema):
        survivor.create_producer(topic, schema=AvroSchema(None, schema_definition=BREAKS_FULL))
    again = survivor.create_producer(topic, schema=AvroSchema(None, schema_definition=V1))
    again.send({"name": "c"})
    consumer = survivor.subscribe(
        topic,
        "s",
        schema=AvroSchema(None, schema_definition=V2),
        initial_position=pulsar.InitialPosition.Earliest,
    )
    got = [consumer.receive(60_000) for _ in range(3)]
    versions = [struct.unpack(">q", m.schema_version().encode("latin-1"))[0] for m in got]
    assert versions == [0, 1, 0]
    assert [m.value() for m in got] == [
        {"name": "a", "n": 0},
        {"name": "b", "n": 1},
        {"name": "c", "n": 0},
    ]
    assert cluster.owner(topic) is other
    latest = json.loads(other.admin("GET", "/admin/v2/schemas/public/default/moving-schema/schema"))
    assert latest["version"] == 1 and json.loads(latest["data"]) == V2

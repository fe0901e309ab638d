"""The replicator's remote side on real processes: entries stored in ``east`` re-published
on ``west`` through ``ClientRemoteCluster`` (``magnetar.client``, built from the
``ClusterData`` east registered for west) arrive as stored for the official client there:
batch entries stay batches, keys, ordering keys, properties and event times intact, with
``replicated_from`` and the source position; and resending with the link's producer name
and source positions is recognised by west (whatever its deduplication policy: here on)."""

from __future__ import annotations

import asyncio
import urllib.request

import pulsar
from support.geo import GeoStandalones
from support.replication_fakes import batch_entry_bytes, entry_bytes
from support.waiting import wait_for

from magnetar.broker.ledger.position import Position
from magnetar.broker.namespace.cluster_data import ClusterData
from magnetar.broker.replication.contracts import ReplicationError
from magnetar.broker.replication.remote import ClientRemoteCluster
from magnetar.broker.replication.republish import Inspected, inspect, rewrite
from magnetar.broker.topics.replication_names import ReplicationLink
from magnetar.broker.topics.replication_positions import SOURCE_POSITION_PROPERTY

LINK = ReplicationLink("east", "west")


def _republished(entries: list[tuple[Position, bytes]]) -> list[object]:
    out = []
    for position, data in entries:
        decided = inspect(position, data, "west", now_ms=10**13)
        assert isinstance(decided, Inspected)
        out.append(rewrite(decided, LINK))
    return out


async def _created(remote: ClientRemoteCluster, topic: str) -> object:
    return await remote.create_producer(topic, LINK.producer_name)


async def _send(data: ClusterData, topic: str, entries: list[tuple[Position, bytes]]) -> None:
    remote = ClientRemoteCluster(data)
    try:
        # the link's previous producer may still be leaving the broker (its connection just
        # closed): a replicator retries too
        producer = await wait_for(
            lambda: _created(remote, topic),
            30,
            "the link's producer made",
            ignore=(ReplicationError,),
        )
        assert producer.connected and producer.address
        futures = [producer.send(e) for e in _republished(entries)]  # type: ignore[arg-type]
        await asyncio.wait_for(asyncio.gather(*futures), 60)
        await producer.close()
    finally:
        await remote.close()


def test_entries_arrive_as_stored(geo_standalones: GeoStandalones) -> None:
    east, west = geo_standalones["east"], geo_standalones["west"]
    # west only: east's own replicator (real now) would hold the link's producer name there
    ns = geo_standalones.replicated_namespace(clusters=("west",))
    topic = f"persistent://{ns}/copied"
    west.ok("POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
    data = ClusterData.from_json("west", east.ok("GET", "/admin/v2/clusters/west"))
    assert data.replication_service_url == west.service_url
    entries = [
        (
            Position(5, 0),
            entry_bytes(
                b"one",
                publish_time_ms=1_000,
                properties={"k": "v"},
                partition_key="key-1",
                ordering_key=b"ord-1",
                event_time=777,
            ),
        ),
        (Position(5, 1), batch_entry_bytes([b"b0", b"b1", b"b2"], publish_time_ms=1_001)),
        (Position(6, 0), entry_bytes(b"last", publish_time_ms=1_002)),
    ]
    client = pulsar.Client(west.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(
            topic, "check", initial_position=pulsar.InitialPosition.Earliest
        )
        asyncio.run(_send(data, topic, entries))
        got = [consumer.receive(30_000) for _ in range(5)]
        for m in got:
            consumer.acknowledge(m)
        assert [m.data() for m in got] == [b"one", b"b0", b"b1", b"b2", b"last"]
        first = got[0]
        assert first.partition_key() == "key-1" and first.event_timestamp() == 777
        assert first.properties() == {"k": "v", SOURCE_POSITION_PROPERTY: "5:0"}
        assert first.publish_timestamp() == 1_000
        batch_ids = [m.message_id() for m in got[1:4]]
        assert len({(i.ledger_id(), i.entry_id()) for i in batch_ids}) == 1  # one entry
        assert [i.batch_index() for i in batch_ids] == [0, 1, 2]
        # the stored entry says where it came from
        request = urllib.request.Request(
            f"{west.web_url}/admin/v2/persistent/{ns}/copied/examinemessage"
            "?initialPosition=earliest&messagePosition=1"
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.headers["X-Pulsar-replicated-from"] == "east"
            assert r.headers[f"X-Pulsar-PROPERTY-{SOURCE_POSITION_PROPERTY}"] == "5:0"
        # the link sends the single entries again (a restarted replicator): recognised
        asyncio.run(_send(data, topic, [entries[0], entries[2]]))
        asyncio.run(_send(data, topic, [(Position(6, 1), entry_bytes(b"new"))]))
        after = consumer.receive(30_000)
        assert after.data() == b"new"
    finally:
        client.close()

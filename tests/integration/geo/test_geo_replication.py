"""Geo-replication between two real clusters (two ``magnetar standalone`` processes, each its
own metadata, registered with each other), with the official client in both.

Every test has its own namespace, replicated to both clusters in each. "Exactly once" is
checked with a positive barrier: after what is expected, a last message (the barrier) is
published, and everything received before it is compared with what was sent.
"""

from __future__ import annotations

import collections
import json
import pathlib
import re
import urllib.request
import uuid
from collections.abc import Iterable

import pulsar
import pytest
from support.geo import GeoCluster, GeoStandalones
from support.magctl import Magctl
from support.waiting import wait_until

BARRIER = b"--barrier--"
DASHBOARD = pathlib.Path(__file__).parents[3] / "deploy" / "grafana" / "magnetar.json"


def _ns(geo: GeoStandalones) -> str:
    return geo.replicated_namespace(f"geo/n{uuid.uuid4().hex[:8]}")


def _client(cluster: GeoCluster) -> pulsar.Client:
    return pulsar.Client(cluster.service_url, operation_timeout_seconds=30)


def _until_barrier(consumer: pulsar.Consumer, barriers: int = 1) -> list[bytes]:
    """Everything received (and acknowledged) until ``barriers`` barriers arrived."""
    got: list[bytes] = []
    seen = 0
    while seen < barriers:
        msg = consumer.receive(30_000)
        consumer.acknowledge(msg)
        if msg.data() == BARRIER:
            seen += 1
        else:
            got.append(msg.data())
    return got


def _publish(producer: pulsar.Producer, bodies: Iterable[bytes], **kwargs: object) -> None:
    """Send every body (asynchronously) and wait until each is stored; fails on any error.
    The producer must block when its queue is full (``block_if_queue_full=True``)."""
    failures: list[object] = []

    def sent(result: object, _msg_id: object) -> None:
        if result != pulsar.Result.Ok:
            failures.append(result)

    for body in bodies:
        producer.send_async(body, sent, **kwargs)
    producer.flush()
    assert not failures, failures


def _stats(cluster: GeoCluster, topic: str) -> dict:
    return cluster.ok("GET", f"/admin/v2/{topic.replace('://', '/')}/stats")


def _replication(cluster: GeoCluster, topic: str, remote: str) -> dict:
    return _stats(cluster, topic).get("replication", {}).get(remote, {})


def _exactly_once(got: Iterable[bytes], sent: Iterable[bytes]) -> None:
    counts = collections.Counter(got)
    duplicates = {k: n for k, n in counts.items() if n > 1}
    assert not duplicates, f"duplicates: {list(duplicates)[:10]}"
    missing = set(sent) - set(counts)
    assert not missing, f"{len(missing)} missing, e.g. {sorted(missing)[:5]}"


def test_one_way_as_stored_with_stats(geo_pair: GeoStandalones) -> None:
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/one-way"
    ce, cw = _client(east), _client(west)
    try:
        consumer = cw.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = ce.create_producer(
            topic, batching_enabled=True, batching_max_messages=10, block_if_queue_full=True
        )
        sent = [f"m{i}".encode() for i in range(50)]
        failures: list[object] = []
        for i, body in enumerate(sent):
            producer.send_async(
                body,
                lambda result, _id: result == pulsar.Result.Ok or failures.append(result),
                properties={"i": str(i)},
                partition_key=f"k{i % 5}",
                event_timestamp=1_000 + i,
            )
        producer.flush()
        assert not failures
        producer.send(BARRIER)
        got = []
        first = None
        while len(got) < len(sent):
            msg = consumer.receive(30_000)
            consumer.acknowledge(msg)
            first = first or msg
            got.append(msg.data())
        assert got == sent  # in order, once
        assert first is not None
        assert first.properties()["i"] == "0" and first.partition_key() == "k0"
        assert first.event_timestamp() == 1_000
        assert consumer.receive(30_000).data() == BARRIER
        # batches stay batches: several messages share an entry in west too
        assert first.message_id().batch_index() >= 0
        out = wait_until(
            lambda: (r := _replication(east, topic, "west")).get("replicationBacklog") == 0 and r,
            30,
            "east's replicator to west caught up",
        )
        assert out["connected"] is True and out["outboundConnection"] and out["state"] == "Started"
        assert out["lastError"] == ""
        assert "pulsar.repl.west" not in _stats(east, topic)["subscriptions"]  # not a user's
        internal = east.ok("GET", f"/admin/v2/persistent/{ns}/one-way/internalStats")
        assert "pulsar.repl.west" in internal["cursors"]
        assert "west" in internal["replication"]
        inbound = _replication(west, topic, "east")
        assert inbound["inboundConnection"]  # east's replicator producing in west
        with urllib.request.urlopen(f"{east.web_url}/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
        assert "pulsar_replication_backlog{" in metrics and 'remote_cluster="west"' in metrics
        dashboard = json.loads(DASHBOARD.read_text())
        used = {
            name
            for panel in dashboard["panels"]
            for target in panel.get("targets", [])
            for name in re.findall(r"pulsar_replication_\w+", target["expr"])
        }
        assert len(used) >= 6 and all(f"{name}{{" in metrics for name in used)  # the row
    finally:
        ce.close()
        cw.close()


def test_both_ways_at_once_no_loop_no_duplicate(geo_pair: GeoStandalones) -> None:
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/both"
    ce, cw = _client(east), _client(west)
    try:
        ce_sub = ce.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        cw_sub = cw.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        pe = ce.create_producer(topic, block_if_queue_full=True)
        pw = cw.create_producer(topic, block_if_queue_full=True)
        east_sent = [f"east-{i}".encode() for i in range(100)]
        west_sent = [f"west-{i}".encode() for i in range(100)]
        for i in range(0, 100, 10):  # both at once
            _publish(pe, east_sent[i : i + 10])
            _publish(pw, west_sent[i : i + 10])
        sent = east_sent + west_sent
        pe.send(BARRIER)
        pw.send(BARRIER)
        for sub in (ce_sub, cw_sub):
            got = _until_barrier(sub, barriers=2)
            _exactly_once(got, sent)
            assert len(got) == len(sent)
        for cluster, remote in ((east, "west"), (west, "east")):
            stats = _stats(cluster, topic)
            assert stats["msgInCounter"] == 2 * 100 + 2  # own and the other's, once each
            assert remote in stats["replication"]
    finally:
        ce.close()
        cw.close()


def test_per_message_disable_replication_and_replication_clusters(
    geo_pair: GeoStandalones,
) -> None:
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/per-message"
    ce, cw = _client(east), _client(west)
    try:
        cw_sub = cw.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        pe = ce.create_producer(topic, batching_enabled=False)
        pe.send(b"everywhere")
        pe.send(b"east only", disable_replication=True)
        pe.send(b"named east", replication_clusters=["east"])
        pe.send(b"named west", replication_clusters=["west"])
        pe.send(BARRIER)
        assert _until_barrier(cw_sub) == [b"everywhere", b"named west"]
    finally:
        ce.close()
        cw.close()


def test_remote_killed_mid_stream_then_back(geo_pair: GeoStandalones, magctl: Magctl) -> None:
    """West is SIGKILLed while east replicates to it: east keeps the backlog (visible in its
    stats, the reason too), and once west is back everything arrives exactly once (west
    recovers what its links stored from its snapshot and the entries after it); ``magctl
    describe topic`` and ``magctl top topics`` show the replication and its backlog."""
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/remote-down"
    east.ok(
        "POST",
        f"/admin/v2/namespaces/{ns}/replicatorDispatchRate",
        {
            "dispatchThrottlingRateInMsg": 400,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1,
        },
    )
    ce = _client(east)
    cw = _client(west)
    try:
        cw.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest).close()
        pe = ce.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        sent = [f"d{i}".encode() for i in range(1200)]
        _publish(pe, sent)
        wait_until(
            lambda: _stats(west, topic)["subscriptions"]["s"]["msgBacklog"] >= 200,
            30,
            "part of the stream in west",
        )
        cw.close()
        geo_pair.processes["west"].kill()
        down = wait_until(
            lambda: (
                (r := _replication(east, topic, "west"))
                and not r["connected"]
                and r["replicationBacklog"] > 0
                and r
            ),
            30,
            "east's stats showing west down with a backlog",
        )
        assert down["lastError"]
        # magctl shows it too: the replication of the topic, and its backlog in top
        described = magctl("describe", "topic", topic, admin_url=east.web_url)
        assert described.code == 0, described.err
        assert "Replication:" in described.out and "west:" in described.out
        assert "connected:" in described.out and "lastError:" in described.out
        top = magctl(
            "top",
            "topics",
            "-n",
            ns,
            "--once",
            "--interval",
            "0.1",
            "--sort-by",
            "replication-backlog",
            admin_url=east.web_url,
        )
        assert top.code == 0, top.err
        header, row = top.out.splitlines()[:2]
        column = header.split().index("REPL-BACKLOG")
        assert int(row.split()[column]) > 0
        geo_pair.restart("west", kill=False)
        pe.send(BARRIER)
        cw = _client(west)
        sub = cw.subscribe(topic, "s")
        got = _until_barrier(sub)
        _exactly_once(got, sent)
        assert got == sent  # and in order
        wait_until(
            lambda: _replication(east, topic, "west").get("replicationBacklog") == 0,
            30,
            "east's backlog for west gone",
        )
    finally:
        ce.close()
        cw.close()


def test_replicating_broker_killed_mid_stream(geo_pair: GeoStandalones) -> None:
    """East (the replicating side) is SIGKILLed while it replicates; after its restart,
    with no client asking for the topic, its replicator is back and sends again from its
    cursor, and west stores nothing twice."""
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/source-killed"
    east.ok(
        "POST",
        f"/admin/v2/namespaces/{ns}/replicatorDispatchRate",
        {
            "dispatchThrottlingRateInMsg": 400,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1,
        },
    )
    ce, cw = _client(east), _client(west)
    try:
        sub = cw.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        pe = ce.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        sent = [f"k{i}".encode() for i in range(1200)]
        _publish(pe, sent)  # all stored in east
        wait_until(
            lambda: _stats(west, topic)["subscriptions"]["s"]["msgBacklog"] >= 200,
            30,
            "part of the stream in west",
        )
        ce.close()
        geo_pair.restart("east")  # SIGKILL, then the same data and ports
        got = []
        while len(got) < len(sent):  # nobody touched the topic in east: it resumed itself
            msg = sub.receive(30_000)
            sub.acknowledge(msg)
            got.append(msg.data())
        ce = _client(east)
        ce.create_producer(topic).send(BARRIER)
        got += _until_barrier(sub)  # nothing between the last message and the barrier
        _exactly_once(got, sent)
        assert got == sent
    finally:
        ce.close()
        cw.close()


def test_partitioned_topic_made_on_the_remote(geo_pair: GeoStandalones) -> None:
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    name = "parts"
    topic = f"persistent://{ns}/{name}"
    east.ok("PUT", f"/admin/v2/persistent/{ns}/{name}/partitions", 3)
    ce, cw = _client(east), _client(west)
    try:
        pe = ce.create_producer(topic, batching_enabled=False)
        sent = [f"p{i}".encode() for i in range(30)]
        for i, body in enumerate(sent):
            pe.send(body, partition_key=str(i))
        wait_until(
            lambda: (
                west.ok("GET", f"/admin/v2/persistent/{ns}/{name}/partitions")["partitions"] == 3
            ),
            30,
            "the partitioned topic made in west",
        )
        sub = cw.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        got = []
        while len(got) < len(sent):
            msg = sub.receive(30_000)
            sub.acknowledge(msg)
            got.append(msg.data())
        _exactly_once(got, sent)
        # more partitions in east: west's count follows before anything is sent there
        east.ok("POST", f"/admin/v2/persistent/{ns}/{name}/partitions", 4)
        ce.create_producer(f"{topic}-partition-3").send(b"in the new partition")
        wait_until(
            lambda: (
                west.ok("GET", f"/admin/v2/persistent/{ns}/{name}/partitions")["partitions"] == 4
            ),
            30,
            "west's partition count raised",
        )
    finally:
        ce.close()
        cw.close()


def test_replicated_subscription_moves_in_the_other_cluster(geo_pair: GeoStandalones) -> None:
    """Acks in east move the same subscription in west (PIP-33): a consumer in west then
    gets nothing east acknowledged before the last snapshot."""
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/repl-sub"
    ce, cw = _client(east), _client(west)
    try:
        for c in (ce, cw):  # the subscription in both, with its state replicated
            c.subscribe(
                topic,
                "shared-state",
                initial_position=pulsar.InitialPosition.Earliest,
                replicate_subscription_state_enabled=True,
            ).close()
        sub = ce.subscribe(topic, "shared-state", replicate_subscription_state_enabled=True)
        pe = ce.create_producer(topic)
        acked = [f"a{i}".encode() for i in range(100)]
        for body in acked:
            pe.send(body)
        for _ in acked:
            sub.acknowledge(sub.receive(30_000))
        west_backlog = wait_until(
            lambda: (
                _stats(west, topic)["subscriptions"]["shared-state"]["msgBacklog"] < 20
                and _stats(west, topic)["subscriptions"]["shared-state"]
            ),
            30,
            "west's subscription moved by east's acknowledgements",
        )
        assert west_backlog["msgBacklog"] < 20  # at most what came after the last snapshot
        sub.close()
        wait_until(  # markers were written after the last ack: none counts as backlog
            lambda: _stats(east, topic)["subscriptions"]["shared-state"]["msgBacklog"] == 0,
            30,
            "east's subscription with nothing left",
        )
        assert _stats(east, topic)["replicatedSubscriptions"]["markersWritten"] > 0
        pe.send(BARRIER)
        west_sub = cw.subscribe(topic, "shared-state", replicate_subscription_state_enabled=True)
        again = _until_barrier(west_sub)
        assert len(again) < 20, again  # only what was acknowledged after the last snapshot
        assert set(again) <= set(acked) and again == acked[len(acked) - len(again) :]
    finally:
        ce.close()
        cw.close()


def test_markers_never_pile_up_nor_stall_readers(geo_pair: GeoStandalones) -> None:
    """Pulsar issues 6437 and 22572: a replicated subscription without consumers never
    counts a marker in its backlog, an idle topic gets no new marker, and a reader whose
    topic ends with markers is told it has read everything."""
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/markers"
    ce, cw = _client(east), _client(west)
    try:
        ce.subscribe(topic, "idle", replicate_subscription_state_enabled=True).close()
        cw.subscribe(topic, "idle", replicate_subscription_state_enabled=True).close()
        pe = ce.create_producer(topic, batching_enabled=False)
        for i in range(30):
            pe.send(f"x{i}".encode())
        for cluster in (west, east):  # west snapshots too: east's messages are new there
            snapshots = wait_until(
                lambda c=cluster: (
                    (s := _stats(c, topic)["replicatedSubscriptions"])["upToDate"]
                    and not s["snapshotsPending"]
                    and s
                ),
                30,
                "a snapshot covering every message, none pending",
            )
        assert snapshots["snapshotsCompleted"] >= 1 and snapshots["markersWritten"] >= 1
        wait_until(  # the markers' acknowledgements settle: only the messages are a backlog
            lambda: _stats(east, topic)["subscriptions"]["idle"]["msgBacklog"] == 30,
            30,
            "the subscription's backlog: the 30 messages",
        )
        east_stats = _stats(east, topic)
        entries = east_stats["numberOfEntries"]
        # idle: several snapshot periods pass, and not one marker is written
        ticks = east_stats["replicatedSubscriptions"]["ticks"]
        wait_until(
            lambda: _stats(east, topic)["replicatedSubscriptions"]["ticks"] >= ticks + 3,
            30,
            "three snapshot periods",
        )
        later = _stats(east, topic)
        assert later["numberOfEntries"] == entries
        assert later["replicatedSubscriptions"]["markersWritten"] == snapshots["markersWritten"]
        assert later["subscriptions"]["idle"]["msgBacklog"] == 30
        # readers in both clusters read to the end and are told so (no marker to wait for)
        for client in (ce, cw):
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            got = []
            while reader.has_message_available():
                got.append(reader.read_next(10_000).data())
            assert got == [f"x{i}".encode() for i in range(30)]
            reader.close()
    finally:
        ce.close()
        cw.close()


def test_removing_a_cluster_stops_replication(geo_pair: GeoStandalones) -> None:
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/removed"
    ce, cw = _client(east), _client(west)
    try:
        sub = cw.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        pe = ce.create_producer(topic)
        pe.send(b"before")
        assert sub.receive(30_000).data() == b"before"
        east.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["east"])
        wait_until(
            lambda: (
                "pulsar.repl.west"
                not in east.ok("GET", f"/admin/v2/persistent/{ns}/removed/internalStats")["cursors"]
            ),
            30,
            "east's replicator cursor for west deleted",
        )
        # west still replicates here (its namespace names east): only that inbound side
        shown = _stats(east, topic)["replication"].get("west", {})
        assert "state" not in shown and shown.get("outboundConnection", "") == ""
        pe.send(b"after")
        cw.create_producer(topic).send(BARRIER)  # west's own: after "after" had its chance
        msg = sub.receive(30_000)
        assert msg.data() == BARRIER
    finally:
        ce.close()
        cw.close()


@pytest.mark.parametrize("schema_kind", ["string"])
def test_schema_registered_on_the_remote(geo_pair: GeoStandalones, schema_kind: str) -> None:
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/with-schema"
    ce, cw = _client(east), _client(west)
    try:
        pe = ce.create_producer(topic, schema=pulsar.schema.StringSchema())
        pe.send("hello")
        wait_until(
            lambda: west.admin("GET", f"/admin/v2/schemas/{ns}/with-schema/schema")[0] == 200,
            30,
            "the schema registered in west",
        )
        sub = cw.subscribe(
            topic,
            "s",
            schema=pulsar.schema.StringSchema(),
            initial_position=pulsar.InitialPosition.Earliest,
        )
        assert sub.receive(30_000).value() == "hello"
    finally:
        ce.close()
        cw.close()


def test_a_changed_cluster_registration_is_used(geo_pair: GeoStandalones) -> None:
    """East's registration of west changes (a wrong URL, then the right one again): the
    replicators towards west reconnect with each, the reason shown meanwhile, and what was
    published in between arrives once."""
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/registration"
    ce, cw = _client(east), _client(west)
    try:
        sub = cw.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        pe = ce.create_producer(topic)
        pe.send(b"a")
        sub.acknowledge(msg := sub.receive(30_000))
        assert msg.data() == b"a"
        wrong = {**west.cluster_data(), "brokerServiceUrl": "pulsar://127.0.0.1:1"}
        east.ok("POST", "/admin/v2/clusters/west", wrong)
        pe.send(b"b")
        failing = wait_until(
            lambda: (
                (r := _replication(east, topic, "west"))
                and not r["connected"]
                and "127.0.0.1:1" in r["lastError"]
                and r
            ),
            30,
            "the replicator failing on the new registration",
        )
        assert failing["replicationBacklog"] >= 1
        east.ok("POST", "/admin/v2/clusters/west", west.cluster_data())
        pe.send(BARRIER)
        assert _until_barrier(sub) == [b"b"]

    finally:
        east.ok("POST", "/admin/v2/clusters/west", west.cluster_data())
        ce.close()
        cw.close()


def test_a_topic_level_policy_overrides_the_namespace(geo_pair: GeoStandalones) -> None:
    """A topic's own replication clusters (``POST .../{topic}/replication``) win over its
    namespace's, live: the topic stops replicating to west while its namespace still does."""
    east, west = geo_pair["east"], geo_pair["west"]
    ns = _ns(geo_pair)
    topic = f"persistent://{ns}/own-policy"
    ce, cw = _client(east), _client(west)
    try:
        sub = cw.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        pe = ce.create_producer(topic)
        pe.send(b"replicated")
        assert sub.receive(30_000).data() == b"replicated"
        east.ok("POST", f"/admin/v2/persistent/{ns}/own-policy/replication", ["east"])
        wait_until(
            lambda: (
                "pulsar.repl.west"
                not in east.ok("GET", f"/admin/v2/persistent/{ns}/own-policy/internalStats")[
                    "cursors"
                ]
            ),
            30,
            "the topic's replicator to west gone",
        )
        pe.send(b"kept in east")
        cw.create_producer(topic).send(BARRIER)
        assert sub.receive(30_000).data() == BARRIER
        # the namespace's other topics still replicate
        other = f"persistent://{ns}/other"
        other_sub = cw.subscribe(other, "s", initial_position=pulsar.InitialPosition.Earliest)
        ce.create_producer(other).send(b"still replicated")
        assert other_sub.receive(30_000).data() == b"still replicated"
    finally:
        ce.close()
        cw.close()

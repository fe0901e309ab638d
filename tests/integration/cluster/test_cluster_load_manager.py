"""The load manager on a real cluster: ZooKeeper, two bookie processes, three ``magnetar
broker`` processes, the official client. Placement by the leader, failover after SIGKILL
without waiting for the dead broker's metadata session, leader death, bundle split."""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterator

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.bookies import BookieFactory
from support.broker_process import BrokerProcess
from support.cluster import Cluster, PublishChecker, drain
from support.waiting import wait_until
from support.zookeeper import ZooKeeperServer

SESSION = "metadata_store_session_timeout_millis=30000\n"
"""Long sessions: failover must not wait for them."""


@pytest.fixture
def cluster(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> Iterator[Cluster]:
    made: list[BrokerProcess] = []
    c = Cluster(zookeeper_server, bookie_factory, tmp_path, made)
    c.start_bookies(2)
    yield c
    c.close_clients()
    for b in made:
        b.kill()


def _namespace(b: BrokerProcess, name: str, bundles: int) -> None:
    b.admin("PUT", f"/admin/v2/namespaces/public/{name}", {"bundles": {"numBundles": bundles}})


def test_the_leader_places_bundles_over_every_broker(cluster: Cluster) -> None:
    brokers = [cluster.start_broker(SESSION) for _ in range(3)]
    _namespace(brokers[0], "spread", 16)
    wait_until(
        lambda: len(json.loads(brokers[0].admin("GET", "/admin/v2/brokers/test"))) == 3,
        60,
        "three load reports",
    )
    # The client names one broker; lookups of unowned bundles go through the leader.
    client = cluster.client(brokers[0].service_url, 30)
    topics = [f"persistent://public/spread/t{i}" for i in range(12)]
    producers = [client.create_producer(t, batching_enabled=False) for t in topics]
    for p in producers:
        p.send(b"x")
    owners = {cluster.owner(t).name for t in topics}
    assert len(owners) >= 2, owners
    leader = cluster.leader_id()
    assert all(cluster.leader_id(via=b) == leader for b in brokers)
    # pulsar_lb_*: one broker leads, and it placed the bundles
    scraped = {b.name: _lb_metrics(b) for b in brokers}
    leaders = [n for n, m in scraped.items() if m["pulsar_lb_is_leader"] == 1]
    assert len(leaders) == 1, scraped
    assert scraped[leaders[0]]["pulsar_lb_bundles_assigned_total"] >= 2
    assert all(m["pulsar_lb_brokers"] == 3 for m in scraped.values())
    client.close()


def _lb_metrics(b: BrokerProcess) -> dict[str, float]:
    text = b.admin("GET", "/metrics").decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("pulsar_lb_")
    }


def test_sigkill_of_the_owner_moves_its_topic_and_loses_nothing(cluster: Cluster) -> None:
    for _ in range(3):
        cluster.start_broker(SESSION)
    topic = "persistent://public/default/failover"
    client = cluster.client(cluster.service_url, 60)
    consumer = client.subscribe(topic, "checker", initial_position=pulsar.InitialPosition.Earliest)
    checker = PublishChecker(client, topic).start()
    wait_until(lambda: checker.acked_count() >= 200, 60, "200 receipts before the kill")
    victim = cluster.owner(topic)
    victim.kill()
    killed_at = time.monotonic()
    wait_until(
        lambda: checker.first_ack_after(killed_at) is not None, 60, "a receipt after the kill"
    )
    new_owner = cluster.owner(topic)
    assert new_owner is not victim and new_owner.running
    resumed = checker.acked_count()
    wait_until(lambda: checker.acked_count() >= resumed + 100, 60, "more receipts")
    acked = checker.stop()
    got = drain(consumer, set(acked), timeout_s=120)
    assert set(acked) <= set(got)
    log_of_leader = "".join(b.log_text() for b in cluster.running)
    assert "does not answer" in log_of_leader  # freed by detection, not by session expiry
    client.close()


def test_a_dead_leader_is_replaced_and_assignments_continue(cluster: Cluster) -> None:
    brokers = [cluster.start_broker(SESSION) for _ in range(3)]
    leader = cluster.leader()
    leader.kill()
    survivors = [b for b in brokers if b is not leader]
    wait_until(
        lambda: cluster.leader_id(via=survivors[0]) != f"127.0.0.1:{leader.web_port}",
        30,
        "a new leader",
    )
    assert cluster.leader_id(via=survivors[0]) == cluster.leader_id(via=survivors[1])
    client = cluster.client(cluster.service_url, 30)
    producer = client.create_producer(
        "persistent://public/default/after-leader", batching_enabled=False
    )
    producer.send(b"placed by the new leader")
    client.close()


def test_admin_split_with_unload_keeps_every_message(cluster: Cluster) -> None:
    brokers = [cluster.start_broker(SESSION) for _ in range(2)]
    _namespace(brokers[0], "splitme", 1)
    topics = [f"persistent://public/splitme/s{i}" for i in range(6)]
    client = cluster.client(cluster.service_url, 60)
    consumers = {
        t: client.subscribe(t, "sub", initial_position=pulsar.InitialPosition.Earliest)
        for t in topics
    }
    checkers = {t: PublishChecker(client, t, prefix=t.rsplit("/", 1)[1]).start() for t in topics}
    wait_until(lambda: all(c.acked_count() >= 50 for c in checkers.values()), 60, "receipts")
    owner = cluster.owner(topics[0])
    bundle = "0x00000000_0xffffffff"
    owner.admin(
        "PUT",
        f"/admin/v2/namespaces/public/splitme/{bundle}/split"
        "?unload=true&splitAlgorithmName=topic_count_equally_divide",
    )
    bundles = json.loads(owner.admin("GET", "/admin/v2/namespaces/public/splitme/bundles"))
    assert bundles["numBundles"] == 2
    wait_until(
        lambda: all(c.acked_count() >= 150 for c in checkers.values()), 90, "receipts after split"
    )
    for t, checker in checkers.items():
        acked = checker.stop()
        ids: dict[bytes, list[str]] = {}
        drain(consumers[t], set(acked), timeout_s=120, ids=ids)
        twice = {p: i for p, i in ids.items() if len(i) > 1}
        assert not twice, f"{t}: {len(twice)} delivered twice: {list(twice.items())[:5]}"
    client.close()


FAST_ROUNDS = (
    "load_balancer_report_update_min_interval_millis=300\n"
    "load_balancer_split_interval_minutes=0.02\n"
    "load_balancer_shedding_interval_minutes=0.05\n"
    "load_balancer_shedding_grace_period_minutes=0.1\n"
    "load_balancer_bundle_unload_min_throughput_threshold=0\n"
)


def test_a_bundle_over_the_topic_threshold_splits_on_its_own(cluster: Cluster) -> None:
    brokers = [
        cluster.start_broker(
            SESSION + FAST_ROUNDS + "load_balancer_namespace_bundle_max_topics=3\n"
        )
        for _ in range(2)
    ]
    _namespace(brokers[0], "auto", 1)
    topics = [f"persistent://public/auto/a{i}" for i in range(8)]
    client = cluster.client(cluster.service_url, 60)
    consumers = {
        t: client.subscribe(t, "sub", initial_position=pulsar.InitialPosition.Earliest)
        for t in topics
    }
    checkers = {t: PublishChecker(client, t, prefix=t.rsplit("/", 1)[1]).start() for t in topics}

    def bundle_count() -> int:
        raw = brokers[0].admin("GET", "/admin/v2/namespaces/public/auto/bundles")
        return int(json.loads(raw)["numBundles"])

    wait_until(lambda: bundle_count() >= 3, 120, "the leader to split the bundle")
    wait_until(
        lambda: len({cluster.owner(t).name for t in topics}) >= 2, 120, "topics on two brokers"
    )
    counts = {t: c.acked_count() for t, c in checkers.items()}
    wait_until(
        lambda: all(c.acked_count() > counts[t] + 20 for t, c in checkers.items()),
        120,
        "receipts after the splits",
    )
    for t, checker in checkers.items():
        acked = checker.stop()
        # every acknowledged publish arrives (drain fails on a missing one). Splits may still
        # be running while the consumer acknowledges: an ack in flight when its bundle moves
        # can be lost and that message delivered again (at least once, as Pulsar's
        # fire-and-forget acks; docs/cluster.md), so duplicates are not checked here: the
        # admin split test, whose consumer acknowledges after the move, checks them
        drain(consumers[t], set(acked), timeout_s=120)
    client.close()


SHED = (
    # CPU is the only usage here (loopback traffic is not counted); weigh it so that one busy
    # broker among idle ones is clearly over the average on a machine of any speed
    "load_balancer_cpu_resource_weight=4\nload_balancer_memory_resource_weight=0\n"
)


def test_shedding_moves_bundles_to_brokers_that_join(cluster: Cluster) -> None:
    first = cluster.start_broker(SESSION + FAST_ROUNDS + SHED)
    _namespace(first, "shed", 8)
    topics = [f"persistent://public/shed/h{i}" for i in range(16)]
    client = cluster.client(first.service_url, 60)
    checkers = [PublishChecker(client, t).start() for t in topics]
    wait_until(lambda: all(c.acked_count() > 50 for c in checkers), 60, "load on one broker")
    assert {cluster.owner(t).name for t in topics} == {first.name}
    for _ in range(2):
        cluster.start_broker(SESSION + FAST_ROUNDS + SHED)
    wait_until(
        lambda: len({cluster.owner(t).name for t in topics}) >= 2,
        180,
        "the leader to shed bundles to the brokers that joined",
    )
    for c in checkers:
        c.stop()
    assert "shedding bundle" in "".join(b.log_text() for b in cluster.brokers)
    client.close()

"""The load manager on a real cluster: ZooKeeper, two bookie processes, three ``magnetar
broker`` processes, the official client. Placement by the leader, failover after SIGKILL
without waiting for the dead broker's metadata session, leader death, bundle split."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.bookies import BookieFactory
from support.broker_process import BrokerProcess
from support.cluster import Cluster, PublishChecker, drain, running_cluster
from support.delivery import AckingConsumer
from support.net import free_port
from support.waiting import wait_until
from support.zookeeper import ZooKeeperServer

from magnetar.broker.namespace.bundles import BundleRange
from magnetar.broker.namespace.ownership import NamespaceBundle, OwnerInfo, OwnershipCache
from magnetar.zk.zookeeper import ZooKeeperMetadataStore

SESSION = "metadata_store_session_timeout_millis=30000\n"
"""Long sessions: failover must not wait for them."""


@pytest.fixture
def cluster(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> Iterator[Cluster]:
    with running_cluster(zookeeper_server, bookie_factory, tmp_path) as c:
        yield c


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


def test_sigkill_of_the_leader_that_owns_the_topic_frees_it_in_one_detection(
    cluster: Cluster,
) -> None:
    """The broker killed is both the load-manager leader and the topic's owner: the follower
    that finds it dead deposes it and frees its bundles itself (the new leader does not have
    to detect it a second time); publishing resumes on a survivor, nothing acked lost."""
    first = cluster.start_broker(SESSION)
    topic = "persistent://public/default/leader-owner"
    cluster.client(first.service_url, 60).create_producer(topic).send(b"on the only broker")
    survivors = [cluster.start_broker(SESSION) for _ in range(2)]
    wait_until(
        lambda: len(json.loads(first.admin("GET", "/admin/v2/brokers/test"))) == 3,
        60,
        "three load reports",
    )
    client = cluster.client(cluster.service_url, 60)
    consumer = client.subscribe(topic, "checker", initial_position=pulsar.InitialPosition.Earliest)
    checker = PublishChecker(client, topic).start()
    wait_until(lambda: checker.acked_count() >= 100, 60, "receipts before the kill")
    assert cluster.leader() is first and cluster.owner(topic) is first
    first.kill()
    killed_at = time.monotonic()
    wait_until(lambda: checker.first_ack_after(killed_at) is not None, 60, "a receipt")
    assert cluster.owner(topic) in survivors
    assert cluster.leader_id(via=survivors[0]) != f"127.0.0.1:{first.web_port}"
    logs = "".join(b.log_text() for b in survivors)
    assert "deposing it and freeing its bundles" in logs, logs[-3000:]
    assert "freed its 1 bundles" in logs
    acked = checker.stop()
    got = drain(consumer, set(acked), timeout_s=120)
    assert set(acked) <= set(got)


def test_a_frozen_owner_is_taken_over_and_fenced_when_it_resumes(cluster: Cluster) -> None:
    """SIGSTOP of the owner: it answers nothing, its metadata session (30 s) stays alive.
    The leader declares it dead after the unresponsive bound and frees its bundles; a new
    owner serves the topic (and fences its ledgers). On SIGCONT the old owner finds its
    ownership gone and closes the topic: its producer moves to the new owner, and every
    acknowledged message, before and after, reaches the consumer."""
    brokers = [cluster.start_broker(SESSION) for _ in range(3)]
    topic = "persistent://public/default/frozen"
    client = cluster.client(cluster.service_url, 60)
    consumer = client.subscribe(topic, "checker", initial_position=pulsar.InitialPosition.Earliest)
    checker = PublishChecker(client, topic).start()
    wait_until(lambda: checker.acked_count() >= 100, 60, "receipts before the freeze")
    victim = cluster.owner(topic)
    others = [b for b in brokers if b is not victim]
    assert victim.proc is not None
    victim.proc.send_signal(signal.SIGSTOP)
    try:
        path = topic.replace("://", "/")
        wait_until(
            lambda: others[0].lookup(path) != victim.service_url, 60, "a lookup naming a survivor"
        )
        new_owner = cluster.by_url(others[0].lookup(path))
        assert new_owner in others
        # a second client, not connected to the frozen broker, publishes through the new
        # owner (which fences the ledgers the frozen one wrote)
        other_client = cluster.client("pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in others))
        producer = other_client.create_producer(topic, batching_enabled=False)
        producer.send(b"while-frozen")
        frozen_acked = checker.acked_count()
    finally:
        victim.proc.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    wait_until(
        lambda: "was taken away" in victim.log_text(), 60, "the old owner to drop the bundle"
    )
    wait_until(lambda: checker.first_ack_after(resumed) is not None, 120, "receipts again")
    wait_until(lambda: checker.acked_count() >= frozen_acked + 100, 120, "steady receipts")
    assert cluster.by_url(others[0].lookup(path)) is new_owner
    acked = checker.stop()
    got = drain(consumer, {*acked, b"while-frozen"}, timeout_s=120)
    assert set(acked) <= set(got)
    assert "answered no probe" in "".join(b.log_text() for b in others)


class Cuttable:
    """A TCP proxy to ZooKeeper for one broker: ``cut()`` closes every connection and stops
    accepting, as a network partition between that broker and ZooKeeper (refused, so the
    broker's client sees it at once)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # cut
            upstream = socket.create_connection(self.target)
            with self._lock:
                if self._cut:
                    client.close()
                    upstream.close()
                    return
                self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            socks, self._socks = self._socks, []
        self._listener.close()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def test_an_owner_cut_from_zookeeper_is_taken_over(
    cluster: Cluster, zookeeper_server: ZooKeeperServer, tmp_path: pathlib.Path
) -> None:
    """The owner, also the leader, loses ZooKeeper (its connection cut; its session stays
    alive on the server until it expires, 30 s) but still serves clients. Its health endpoint
    says so (503), the followers find it unresponsive, depose it and free its bundles, and
    another broker serves the topic; the cut broker's next write fails on the fenced ledger,
    so its producer moves too; every acknowledged message reaches the consumer."""
    proxy = Cuttable((zookeeper_server.host, zookeeper_server.port))
    metadata = cluster.metadata.replace(
        f"{zookeeper_server.host}:{zookeeper_server.port}", f"127.0.0.1:{proxy.port}"
    )
    victim = BrokerProcess(tmp_path, "broker-cut", metadata, extra_config=SESSION)
    cluster.brokers.append(victim)
    victim.start()
    topic = "persistent://public/default/cut"
    # the victim, alone at first, takes the topic (and leads)
    cluster.client(victim.service_url, 60).create_producer(topic).send(b"on the only broker")
    others = [cluster.start_broker(SESSION) for _ in range(2)]
    wait_until(
        lambda: len(json.loads(others[0].admin("GET", "/admin/v2/brokers/test"))) == 3,
        60,
        "three load reports",
    )
    assert cluster.owner(topic) is victim
    client = cluster.client(cluster.service_url, 60)
    consumer = client.subscribe(topic, "checker", initial_position=pulsar.InitialPosition.Earliest)
    checker = PublishChecker(client, topic).start()
    wait_until(lambda: checker.acked_count() >= 100, 60, "receipts before the cut")
    proxy.cut()
    path = topic.replace("://", "/")
    wait_until(
        lambda: others[0].lookup(path) != victim.service_url, 60, "a lookup naming a survivor"
    )
    assert "answered no probe" in "".join(b.log_text() for b in others)
    cut_at = time.monotonic()
    other_client = cluster.client("pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in others))
    other_client.create_producer(topic, batching_enabled=False).send(b"after-the-cut")
    # the new owner fenced the ledger: the cut broker's next write fails and it closes the
    # topic, so its producer moves too
    wait_until(lambda: checker.first_ack_after(cut_at) is not None, 120, "receipts again")
    acked = checker.stop()
    got = drain(consumer, {*acked, b"after-the-cut"}, timeout_s=120)
    assert set(acked) <= set(got)


def test_lookups_racing_on_every_broker_agree_on_one_owner(cluster: Cluster) -> None:
    """Many lookups of the same unowned topics at once, on all three brokers: every answer
    for a topic names the same broker."""
    brokers = [cluster.start_broker(SESSION) for _ in range(3)]
    _namespace(brokers[0], "race", 8)
    wait_until(
        lambda: len(json.loads(brokers[0].admin("GET", "/admin/v2/brokers/test"))) == 3,
        60,
        "three load reports",
    )
    topics = [f"persistent/public/race/r{i}" for i in range(8)]
    answers: dict[str, list[str]] = {t: [] for t in topics}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(brokers) * 2)

    def look(b: BrokerProcess) -> None:
        try:
            barrier.wait(30)
            for t in topics:
                answers[t].append(b.lookup(t))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=look, args=(b,)) for b in brokers for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    for t, got in answers.items():
        assert len(got) == 6 and len(set(got)) == 1, (t, got)


async def test_two_brokers_racing_to_acquire_one_bundle_give_it_one_owner(
    zookeeper_server: ZooKeeperServer,
) -> None:
    """The invariant under placement: two brokers' ownership caches (two ZooKeeper sessions)
    acquire the same bundles at the same moment, many times: each bundle has exactly one
    owner, and both agree which."""
    root = f"{zookeeper_server.url}/race-{time.monotonic_ns()}"
    stores = [await ZooKeeperMetadataStore.connect(root) for _ in range(2)]
    try:
        caches = [
            OwnershipCache(s, OwnerInfo(f"pulsar://127.0.0.1:{i}", f"http://127.0.0.1:{i}"))
            for i, s in enumerate(stores, start=1)
        ]
        width = 2**32 // 64
        for i in range(64):
            rng = BundleRange(i * width, min((i + 1) * width, 0xFFFFFFFF))
            bundle = NamespaceBundle("t", "ns", rng)
            a, b = await asyncio.gather(*(c.try_acquire(bundle) for c in caches))
            assert a == b  # both answer the same owner
            owners = [c for c in caches if c.is_owned(bundle)]
            assert len(owners) == 1, (bundle, a, b)
            assert owners[0].me == a
        assert len(caches[0].owned) + len(caches[1].owned) == 64
    finally:
        for s in stores:
            await s.close()


def _acking_load(
    client: pulsar.Client, topics: list[str]
) -> tuple[dict[str, AckingConsumer], dict[str, PublishChecker]]:
    """For each topic, a consumer acknowledging each message at once and a producer
    recording every receipt, at most ~1,000 a second (bursts of 5 between 5 ms pauses): the
    consumers these tests are about keep up, also on a busy CI machine (at the default bursts
    of 20, one CI run's consumers fell behind their receive queues and 140 acknowledged
    messages came again after the split: the documented case of a consumer holding a deep
    queue at a move, docs/cluster.md)."""
    receivers = {
        t: AckingConsumer(
            client.subscribe(t, "sub", initial_position=pulsar.InitialPosition.Earliest)
        ).start()
        for t in topics
    }
    checkers = {
        t: PublishChecker(client, t, prefix=t.rsplit("/", 1)[1], burst=5).start() for t in topics
    }
    return receivers, checkers


def _assert_nothing_lost_or_redelivered(
    receivers: dict[str, AckingConsumer], checkers: dict[str, PublishChecker]
) -> None:
    for t, checker in checkers.items():
        acked = checker.stop()
        counts = receivers[t].stop(set(acked), timeout_s=120)
        assert counts.lost == 0, (t, counts)
        assert counts.acked_redelivered == 0, (t, counts)


def test_admin_split_with_unload_keeps_every_message(cluster: Cluster) -> None:
    """An admin split with unload while every topic's producer publishes and its consumer
    receives and acknowledges each message at once: nothing acknowledged is lost, nothing
    acknowledged is delivered again (the old owner takes the consumers' acks before
    CLOSE_CONSUMER and, with the ack barrier, those still in flight after it)."""
    brokers = [cluster.start_broker(SESSION) for _ in range(2)]
    _namespace(brokers[0], "splitme", 1)
    # three topics (as the namespace-unload test): the official client's consumers keep up
    # on a slow machine too; a consumer that falls behind its receive queue at the move
    # may have acks redelivered (docs/cluster.md, "Acknowledgements across moves and
    # failures"), which is not what this test is about. Six topics failed once on a CI
    # run at half this machine's usual speed (14 of 3,031 acknowledged redelivered).
    topics = [f"persistent://public/splitme/s{i}" for i in range(3)]
    client = cluster.client(cluster.service_url, 60)
    receivers, checkers = _acking_load(client, topics)
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
    got = {t: r.received for t, r in receivers.items()}
    wait_until(
        lambda: all(receivers[t].received >= got[t] + 100 for t in topics),
        90,
        "messages received after the split",
    )
    _assert_nothing_lost_or_redelivered(receivers, checkers)
    client.close()


def test_namespace_unloads_under_load_redeliver_nothing_acknowledged(cluster: Cluster) -> None:
    """Every bundle of a namespace unloaded (on each broker) three times while three topics
    are published to and their official-client consumers acknowledge each message at once."""
    brokers = [cluster.start_broker(SESSION) for _ in range(2)]
    _namespace(brokers[0], "nsunload", 4)
    topics = [f"persistent://public/nsunload/u{i}" for i in range(3)]
    client = cluster.client(cluster.service_url, 60)
    receivers, checkers = _acking_load(client, topics)
    wait_until(lambda: all(r.received >= 100 for r in receivers.values()), 60, "messages")
    for _ in range(3):
        for b in brokers:
            b.admin("PUT", "/admin/v2/namespaces/public/nsunload/unload")
        got = {t: r.received for t, r in receivers.items()}
        wait_until(
            lambda g=got: all(receivers[t].received >= g[t] + 100 for t in topics),
            90,
            "messages after the unload",
        )
    _assert_nothing_lost_or_redelivered(receivers, checkers)
    client.close()


def test_unloads_while_the_consumer_acknowledges_redeliver_nothing_acknowledged(
    cluster: Cluster,
) -> None:
    """A consumer receiving and acknowledging at once while its topic's bundle is unloaded
    again and again: the old owner stops dispatching and takes the acknowledgements the
    client still groups before it sends CLOSE_CONSUMER, so the next owner redelivers no
    acknowledged message (before, each unload redelivered the last ~0.2 s of them)."""
    brokers = [cluster.start_broker(SESSION) for _ in range(2)]
    topic = "persistent://public/default/acking"
    client = cluster.client(cluster.service_url, 60)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    receiver = AckingConsumer(consumer).start()
    checker = PublishChecker(client, topic).start()
    wait_until(lambda: receiver.received >= 300, 60, "messages received")
    for _ in range(3):
        owner = cluster.owner(topic)
        raw = owner.admin("GET", "/lookup/v2/topic/persistent/public/default/acking/bundle")
        owner.admin("PUT", f"/admin/v2/namespaces/public/default/{json.loads(raw)}/unload")
        got = receiver.received
        wait_until(lambda g=got: receiver.received >= g + 300, 60, "messages after the unload")
    acked = checker.stop()
    counts = receiver.stop(set(acked), timeout_s=120)
    assert counts.lost == 0, counts
    assert counts.acked_redelivered == 0, counts
    assert all(b.running for b in brokers)


FAST_ROUNDS = (
    "load_balancer_report_update_min_interval_millis=300\n"
    "load_balancer_split_interval_minutes=0.02\n"
    "load_balancer_shedding_interval_minutes=0.05\n"
    "load_balancer_shedding_grace_period_minutes=0.1\n"
    "load_balancer_bundle_unload_min_throughput_threshold=0\n"
)


def test_a_bundle_over_the_topic_threshold_splits_on_its_own(cluster: Cluster) -> None:
    brokers = [
        # SHED: placement by this process's CPU alone, so the idle broker is clearly the less
        # used one however loaded the machine is (with memory weighed in, a CI run on a busy
        # machine once placed every split bundle back on the busy broker). A low shedding
        # threshold: with a CPU burner beside it, the busy broker's own CPU share stayed
        # within the default 10 % of the average and nothing was shed to the idle one in 120 s
        cluster.start_broker(
            SESSION
            + FAST_ROUNDS
            + SHED
            + "load_balancer_namespace_bundle_max_topics=3\n"
            + "load_balancer_broker_threshold_shedder_percentage=2\n"
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
        # every acknowledged publish arrives (drain fails on a missing one). Splits and sheds
        # may still move a bundle while drain works through a full receive queue (1,000
        # prefetched): the official client drops the acks it makes or still groups after it
        # read CLOSE_CONSUMER, and those messages come again (docs/cluster.md,
        # "Acknowledgements across moves and failures"), so duplicates are not checked here:
        # the admin split and namespace unload tests, whose consumers keep up, check them
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

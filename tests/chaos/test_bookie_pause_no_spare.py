"""A bookie that hangs (SIGSTOP) under a steady publisher, in a cluster with no spare bookie
(two bookies, E=Qw=Qa=2): the broker's ledger cannot replace it and is given up after the
ensemble change timeout. The publishes it had not confirmed go to the next ledger, which is
made as soon as the bookie answers again: the official client's receipts come late, none
fails, and every acknowledged message is stored once and delivered.

Real processes: ZooKeeper, two bookies, one ``magnetar broker``; the official client.
"""

from __future__ import annotations

import collections
import pathlib
from collections.abc import Iterator

import pulsar
import pytest
from support.bookies import BookieFactory
from support.cluster import Cluster, PublishChecker, drain, running_cluster
from support.waiting import wait_until
from support.zookeeper import ZooKeeperServer

TOPIC = "persistent://public/default/pause-no-spare"


@pytest.fixture
def cluster(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> Iterator[Cluster]:
    with running_cluster(zookeeper_server, bookie_factory, tmp_path, bookies=0) as c:
        yield c


def test_a_paused_bookie_with_no_spare_delays_receipts_and_loses_nothing(
    cluster: Cluster, bookie_factory: BookieFactory
) -> None:
    bookies = bookie_factory.start_many(2, metadata=cluster.metadata)
    broker = cluster.start_broker()
    client = cluster.client(broker.service_url, 120)
    consumer = client.subscribe(
        TOPIC, "s", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=100
    )
    checker = PublishChecker(client, TOPIC, burst=1).start()
    wait_until(lambda: checker.acked_count() >= 100, 60, "receipts before the pause")
    victim = bookies[0]
    victim.pause()
    try:
        wait_until(
            lambda: "unconfirmed adds go to the next ledger" in broker.log_text(),
            90,
            "the broker to give the ledger up",
        )
    finally:
        victim.resume()
    resumed_with = checker.acked_count()
    wait_until(lambda: checker.acked_count() >= resumed_with + 200, 120, "receipts after the pause")
    acked = checker.stop()
    # a full pending queue refuses a send at once (the client's back-pressure: never sent);
    # any other failed receipt would be a publish the broker gave up
    failed = [
        f for f in checker.failed if not f.startswith("send_async") and "QueueIsFull" not in f
    ]
    assert failed == []
    got = drain(consumer, set(acked), timeout_s=120)
    stored_twice = [p for p, n in collections.Counter(got).items() if n > 1]
    assert stored_twice == []

"""SIGKILL of a topic's owner under publish load: no message whose ack receipt arrived is
ever delivered again, and nothing acknowledged to the producer is lost.

Real processes: ZooKeeper, two bookies, two ``magnetar broker`` processes (metadata session
30 s: the takeover must come from the leader's detection, not from session expiry). An
official-client producer publishes steadily; our client's consumer (``ack_receipt_enabled``)
receives and acknowledges each message at once, and counts an ack only when its receipt came
back: the broker answers ACK_RESPONSE once the cursor change is in a durable cursor-ledger
entry, so the next owner, recovering the cursor from the bookies, never redelivers it. The
owner is SIGKILLed twice (restarted in between, so two brokers stay). Acks the official
client still groups at a SIGKILL cannot be known by anyone; see docs/cluster.md.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator

import pytest
from support.bookies import BookieFactory
from support.cluster import Cluster, PublishChecker, running_cluster
from support.delivery import magnetar_acking_consumer
from support.waiting import wait_until
from support.zookeeper import ZooKeeperServer

from magnetar.client import InitialPosition
from magnetar.client.sync import Client

SESSION = "metadata_store_session_timeout_millis=30000\n"
TOPIC = "persistent://public/default/receipts-failover"


@pytest.fixture
def cluster(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> Iterator[Cluster]:
    with running_cluster(zookeeper_server, bookie_factory, tmp_path) as c:
        yield c


def test_sigkill_of_the_owner_redelivers_no_receipt_confirmed_ack(cluster: Cluster) -> None:
    brokers = [cluster.start_broker(SESSION) for _ in range(2)]
    ours = Client(cluster.service_url, operation_timeout_seconds=60)
    try:
        consumer = ours.subscribe(
            TOPIC,
            "receipts",
            initial_position=InitialPosition.Earliest,
            ack_receipt_enabled=True,
        )
        receiver = magnetar_acking_consumer(consumer).start()
        # at most ~200 messages a second: the consumer waits for one receipt per message
        checker = PublishChecker(cluster.client(cluster.service_url, 60), TOPIC, burst=1).start()
        wait_until(lambda: receiver.received >= 200, 60, "200 messages before the first kill")
        for _ in range(2):
            victim = cluster.owner(TOPIC)
            victim.kill()
            killed_at = time.monotonic()
            wait_until(
                lambda k=killed_at: checker.first_ack_after(k) is not None,
                60,
                "a receipt from the new owner",
            )
            got = receiver.received
            wait_until(
                lambda g=got: receiver.received >= g + 200, 60, "messages after the takeover"
            )
            assert cluster.owner(TOPIC) is not victim
            victim.restart()
        acked = checker.stop()
        counts = receiver.stop(set(acked), timeout_s=300)
        print("delivery counts:", counts)
        assert counts.lost == 0, counts
        assert counts.acked_redelivered == 0, counts
        assert all(b.running for b in brokers)
    finally:
        ours.close()

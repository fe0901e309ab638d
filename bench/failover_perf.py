"""Broker failover: time from SIGKILL of a topic's owner to the first publish receipt from its
new owner, over ``--kills`` kills, with lost and duplicated counts.

A real cluster (ZooKeeper from Debian's jar, ``--bookies`` bookie processes, ``--brokers``
``magnetar broker`` processes with default load-manager settings and a long metadata session
of ``--session-ms``, so the figure shows detection, not session expiry). An official-client
producer publishes steadily (``PublishChecker`` of tests/support/cluster.py) while one
consumer receives; each round kills the current owner of the topic, waits for the first
receipt after the kill, then restarts the killed broker (same ports). At the end every
acknowledged payload must have reached the consumer: lost = acknowledged and never received,
duplicated = received more than once.

    .venv/bin/python bench/failover_perf.py --kills 10
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import pulsar  # noqa: E402
from support.cluster import (  # noqa: E402
    PublishChecker,
    lost_and_duplicated,
    own_cluster,
    wait_until,
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--bookies", type=int, default=2)
    p.add_argument("--session-ms", type=int, default=30_000)
    args = p.parse_args()
    print("command:", " ".join([".venv/bin/python", "bench/failover_perf.py", *sys.argv[1:]]))
    gaps_s: list[float] = []
    extra = f"metadata_store_session_timeout_millis={args.session_ms}\n"
    with own_cluster(
        "failover-perf-", bookies=args.bookies, brokers=args.brokers, extra_config=extra
    ) as cluster:
        topic = "persistent://public/default/failover-perf"
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60)
        consumer = client.subscribe(topic, "perf", initial_position=pulsar.InitialPosition.Earliest)
        checker = PublishChecker(client, topic).start()
        wait_until(lambda: checker.acked_count() >= 100, 60, "receipts before the first kill")
        for _ in range(args.kills):
            victim = cluster.owner(topic)
            before = checker.acked_count()
            victim.kill()
            killed = time.monotonic()
            wait_until(lambda k=killed: checker.first_ack_after(k) is not None, 120, "a receipt")
            first = checker.first_ack_after(killed)
            assert first is not None
            gaps_s.append(first - killed)
            victim.start()
            wait_until(lambda b=before: checker.acked_count() >= b + 100, 120, "steady receipts")
        acked = checker.stop()
        lost, duplicated = lost_and_duplicated(consumer, acked)
        client.close()
    gaps_s.sort()
    print(
        json.dumps(
            {
                "kills": len(gaps_s),
                "gap_p50_s": round(statistics.median(gaps_s), 3),
                "gap_max_s": round(gaps_s[-1], 3),
                "gaps_s": [round(g, 3) for g in gaps_s],
                "acknowledged": len(acked),
                "lost": lost,
                "duplicated": duplicated,
                "brokers": args.brokers,
                "session_ms": args.session_ms,
            }
        )
    )


if __name__ == "__main__":
    main()

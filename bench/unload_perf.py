"""Graceful unload: the publish gap a client sees while its topic's bundle is unloaded and
placed again, over ``--unloads`` unloads (target: p99 <= 1 s).

A real cluster (ZooKeeper from Debian's jar, ``--bookies`` bookie processes, ``--brokers``
``magnetar broker`` processes). An official-client producer publishes steadily
(``PublishChecker`` of tests/support/cluster.py). Each round asks the owner to unload the
topic's bundle (``PUT /admin/v2/namespaces/{t}/{ns}/{bundle}/unload``); the gap of that
round is the longest time between two consecutive receipts from just before the unload to
the first receipt after the topic is served again. A consumer receives and acknowledges each
message at once throughout (``tests/support/delivery.py``): at the end every acknowledged payload
must have reached it; duplicates are told apart (``stored_twice``: one payload under two
message ids; ``acked_redelivered``: a message id delivered again after it was acknowledged).

    .venv/bin/python bench/unload_perf.py --unloads 20
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import pulsar  # noqa: E402
from support.cluster import PublishChecker, own_cluster, wait_until  # noqa: E402
from support.delivery import AckingConsumer  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--unloads", type=int, default=20)
    p.add_argument("--brokers", type=int, default=2)
    p.add_argument("--bookies", type=int, default=2)
    p.add_argument(
        "--consumer-work-ms",
        type=float,
        default=0.0,
        help="simulated work per message before its ack: a consumer slower than the producer "
        "holds a full receive queue at each unload (the official client then drops the acks "
        "it makes after it read CLOSE_CONSUMER: docs/cluster.md)",
    )
    args = p.parse_args()
    print("command:", " ".join([".venv/bin/python", "bench/unload_perf.py", *sys.argv[1:]]))
    gaps_s: list[float] = []
    with own_cluster("unload-perf-", bookies=args.bookies, brokers=args.brokers) as cluster:
        topic = "persistent://public/default/unload-perf"
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60)
        consumer = client.subscribe(topic, "perf", initial_position=pulsar.InitialPosition.Earliest)
        receiver = AckingConsumer(consumer, work_s=args.consumer_work_ms / 1000).start()
        checker = PublishChecker(client, topic).start()
        wait_until(lambda: checker.acked_count() >= 100, 60, "receipts before the first unload")
        for _ in range(args.unloads):
            owner = cluster.owner(topic)
            bundle = json.loads(
                owner.admin("GET", "/lookup/v2/topic/persistent/public/default/unload-perf/bundle")
            )
            before = time.monotonic()
            owner.admin("PUT", f"/admin/v2/namespaces/public/default/{bundle}/unload")
            done = time.monotonic()
            wait_until(lambda d=done: checker.first_ack_after(d) is not None, 60, "a receipt")
            resumed = checker.first_ack_after(done)
            assert resumed is not None
            times = checker.ack_times(before - 1, resumed)
            gaps_s.append(max((b - a for a, b in itertools.pairwise(times)), default=0.0))
            count = checker.acked_count()
            wait_until(lambda c=count: checker.acked_count() >= c + 50, 60, "steady receipts")
        acked = checker.stop()
        counts = receiver.stop(set(acked))
        client.close()
    gaps_s.sort()
    consumer_work = {"consumer_work_ms": args.consumer_work_ms} if args.consumer_work_ms else {}
    print(
        json.dumps(
            {
                "unloads": len(gaps_s),
                "gap_p50_s": round(statistics.median(gaps_s), 3),
                "gap_p95_s": round(gaps_s[min(len(gaps_s) - 1, int(0.95 * len(gaps_s)))], 3),
                # nearest rank: below 100 unloads the p99 is the largest gap (as max)
                "gap_p99_s": round(gaps_s[min(len(gaps_s) - 1, int(0.99 * len(gaps_s)))], 3),
                "gap_max_s": round(gaps_s[-1], 3),
                **counts.as_dict(),
                **consumer_work,
            }
        )
    )


if __name__ == "__main__":
    main()

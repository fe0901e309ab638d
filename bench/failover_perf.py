"""Broker failover: time from SIGKILL of a topic's owner to the first publish receipt from its
new owner, over ``--kills`` kills, with lost and duplicated counts.

A real cluster (ZooKeeper from Debian's jar, ``--bookies`` bookie processes, ``--brokers``
``magnetar broker`` processes with default load-manager settings and a long metadata session
of ``--session-ms``, so the figure shows detection, not session expiry). An official-client
producer publishes steadily (``PublishChecker`` of tests/support/cluster.py) while one
consumer receives and acknowledges each message at once (``tests/support/delivery.py``); each round
kills the current owner of the topic (``--signal STOP`` freezes it instead: its session stays
alive, the leader must find it unresponsive; it is resumed after the round), waits for the
first receipt after the kill, then restarts the killed broker (same ports). Every acknowledged
payload must reach the consumer; duplicates are told apart: ``stored_twice`` (the producer
resent a message whose receipt died with the broker; ``--dedup`` turns on
``broker_deduplication_enabled``, which drops those) and ``acked_redelivered`` (a message id
delivered again after the consumer acknowledged it).

``--consumer official`` (default): the official client's consumer, whose acks are grouped for
100 ms without receipts; those still grouped when the owner dies are redelivered (nobody can
know them). ``--consumer magnetar``: our client's consumer with ``ack_receipt_enabled``, so
``acked_redelivered`` counts only acks whose receipt arrived (target 0: a receipt means the
cursor change is durable).

    .venv/bin/python bench/failover_perf.py --kills 10
    .venv/bin/python bench/failover_perf.py --kills 10 --consumer magnetar
"""

from __future__ import annotations

import argparse
import json
import pathlib
import signal
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import pulsar  # noqa: E402
from support.cluster import PublishChecker, own_cluster, wait_until  # noqa: E402
from support.delivery import AckingConsumer, magnetar_acking_consumer  # noqa: E402

from magnetar.client import InitialPosition  # noqa: E402
from magnetar.client.sync import Client as MagnetarClient  # noqa: E402

PATH = "persistent/public/default/failover-perf"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--bookies", type=int, default=2)
    p.add_argument("--session-ms", type=int, default=30_000)
    p.add_argument("--signal", choices=("KILL", "STOP"), default="KILL")
    p.add_argument("--dedup", action="store_true", help="broker_deduplication_enabled=true")
    p.add_argument(
        "--consumer",
        choices=("official", "magnetar"),
        default="official",
        help="the acknowledging consumer: the official client, or ours with ack receipts",
    )
    args = p.parse_args()
    print("command:", " ".join([".venv/bin/python", "bench/failover_perf.py", *sys.argv[1:]]))
    gaps_s: list[float] = []
    extra = f"metadata_store_session_timeout_millis={args.session_ms}\n"
    if args.dedup:
        extra += "broker_deduplication_enabled=true\n"
    with own_cluster(
        "failover-perf-", bookies=args.bookies, brokers=args.brokers, extra_config=extra
    ) as cluster:
        topic = "persistent://" + PATH.split("/", 1)[1]
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60)
        ours: MagnetarClient | None = None
        if args.consumer == "magnetar":
            ours = MagnetarClient(cluster.service_url, operation_timeout_seconds=60)
            receiver = magnetar_acking_consumer(
                ours.subscribe(
                    topic,
                    "perf",
                    initial_position=InitialPosition.Earliest,
                    ack_receipt_enabled=True,
                )
            ).start()
        else:
            consumer = client.subscribe(
                topic, "perf", initial_position=pulsar.InitialPosition.Earliest
            )
            receiver = AckingConsumer(consumer).start()
        checker = PublishChecker(client, topic).start()
        wait_until(lambda: checker.acked_count() >= 100, 60, "receipts before the first kill")
        for _ in range(args.kills):
            victim = cluster.owner(topic)
            was_leader = cluster.leader() is victim
            before = checker.acked_count()
            assert victim.proc is not None
            if args.signal == "KILL":
                victim.kill()
            else:
                victim.proc.send_signal(signal.SIGSTOP)
            killed = time.monotonic()
            if args.signal == "STOP":
                # the producer's connection to the frozen broker stays open (the client
                # notices only by its keep-alive, 30 s): the figure is when a lookup on a
                # survivor names another broker and a fresh producer there gets a receipt
                others = [b for b in cluster.running if b is not victim]
                wait_until(
                    lambda o=others[0], u=victim.service_url: o.lookup(PATH) != u, 120, "lookup"
                )
                probe = pulsar.Client(
                    "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in others),
                    operation_timeout_seconds=60,
                )
                probe.create_producer(topic).send(b"probe")
                gaps_s.append(time.monotonic() - killed)
                probe.close()
                victim.proc.send_signal(signal.SIGCONT)
                wait_until(lambda v=victim: "was taken away" in v.log_text(), 120, "fenced")
            else:
                wait_until(
                    lambda k=killed: checker.first_ack_after(k) is not None, 120, "a receipt"
                )
                first = checker.first_ack_after(killed)
                assert first is not None
                gaps_s.append(first - killed)
                victim.start()
            print(f"round {len(gaps_s)}: {gaps_s[-1]:.3f} s (leader: {was_leader})", flush=True)
            wait_until(lambda b=before: checker.acked_count() >= b + 100, 120, "steady receipts")
        acked = checker.stop()
        counts = receiver.stop(set(acked))
        client.close()
        if ours is not None:
            ours.close()
    gaps_s.sort()
    print(
        json.dumps(
            {
                "kills": len(gaps_s),
                "gap_p50_s": round(statistics.median(gaps_s), 3),
                "gap_max_s": round(gaps_s[-1], 3),
                "gaps_s": [round(g, 3) for g in gaps_s],
                **counts.as_dict(),
                "brokers": args.brokers,
                "session_ms": args.session_ms,
                "signal": args.signal,
                "dedup": args.dedup,
                "consumer": args.consumer,
            }
        )
    )


if __name__ == "__main__":
    main()

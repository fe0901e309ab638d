"""Drain a backlog that has left the entry cache: a consumer far behind reads from the bookies.

Starts ``magnetar standalone`` (settings from ``MAGNETAR_*`` variables pass through, e.g.
``MAGNETAR_MANAGED_LEDGER_READ_AHEAD_ENTRIES=0`` for one bookie read at a time), creates a
durable subscription, publishes ``--messages`` unbatched ``--size``-byte messages with the
official client while nobody consumes, waits ``--idle-s`` (past the cache's age eviction,
``managedLedgerCacheEvictionTimeThresholdMillis`` 1000), then one consumer receives and
acknowledges the whole backlog. Reports the drain rate, that every message came once and in
order, and the broker's and bookie's CPU over the drain per drained message (with
``--publish-during`` that includes the publishing meanwhile: compare runs, not processes).
The last line is one JSON object.

    .venv/bin/python bench/backlog_drain.py --messages 100000
    .venv/bin/python bench/backlog_drain.py --messages 100000 --publish-during
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import StandaloneServer, loadavg

_PUBLISHER = """
import signal, sys, pulsar
url, topic, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
client = pulsar.Client(url, operation_timeout_seconds=60)
producer = client.create_producer(
    topic, batching_enabled=False, max_pending_messages=5000, block_if_queue_full=True
)
payload = b"x" * (size - 8)
print("READY", flush=True)
i = 1 << 40  # the drain loop tells these from the backlog by their number
while not stop:
    producer.send_async(i.to_bytes(8, "big") + payload, lambda r, m: None)
    i += 1
producer.flush()
print("PUBLISHED", i - (1 << 40), flush=True)
client.close()
"""


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--idle-s", type=float, default=2.0)
    p.add_argument("--receiver-queue-size", type=int, default=1000)
    p.add_argument(
        "--publish-during",
        action="store_true",
        help="keep publishing (same topic, as fast as the client goes) while the backlog "
        "drains: the broker's loop is busy with SENDs, as when a consumer fell behind",
    )
    args = p.parse_args()
    print("#", shlex.join([sys.executable, *sys.argv]), flush=True)
    import pulsar  # the official client

    server = StandaloneServer().start()
    try:
        client = pulsar.Client(server.service_url, operation_timeout_seconds=60)
        topic = "persistent://public/default/backlog-drain"
        sub = client.subscribe(topic, "drain", receiver_queue_size=args.receiver_queue_size)
        sub.close()
        producer = client.create_producer(
            topic, batching_enabled=False, max_pending_messages=5000, block_if_queue_full=True
        )
        payload = b"x" * (args.size - 8)
        errors: list[object] = []

        def sent(res: object, _mid: object) -> None:
            if res != pulsar.Result.Ok:
                errors.append(res)

        t0 = time.monotonic()
        for i in range(args.messages):
            producer.send_async(i.to_bytes(8, "big") + payload, sent)
        producer.flush()
        publish_s = time.monotonic() - t0
        time.sleep(args.idle_s)  # the backlog leaves the entry cache (age eviction)
        broker_pid = server.pid
        assert broker_pid is not None
        bookies = server.bookie_pids()
        publisher = None
        if args.publish_during:  # another process: the consumer keeps its own GIL
            publisher = subprocess.Popen(
                [sys.executable, "-c", _PUBLISHER, server.service_url, topic, str(args.size)],
                stdout=subprocess.PIPE,
            )
            assert publisher.stdout is not None
            for line in publisher.stdout:  # publishing has begun (the client logs here too)
                if line.startswith(b"READY"):
                    break
            else:
                raise RuntimeError("the publisher process exited before it was ready")
        cpu0 = _cpu_s(broker_pid), sum(_cpu_s(b) for b in bookies)
        consumer = client.subscribe(topic, "drain", receiver_queue_size=args.receiver_queue_size)
        expected = 0
        out_of_order = 0
        t1 = time.monotonic()
        while expected < args.messages:
            msg = consumer.receive(timeout_millis=60_000)
            n = int.from_bytes(msg.data()[:8], "big")
            if n != expected:
                out_of_order += 1
            expected = n + 1
            consumer.acknowledge(msg)
        drain_s = time.monotonic() - t1
        cpu1 = _cpu_s(broker_pid), sum(_cpu_s(b) for b in bookies)
        during = 0
        if publisher is not None:
            publisher.send_signal(signal.SIGTERM)
            out, _ = publisher.communicate(timeout=60)
            lines = out.decode().splitlines()
            counts = [ln.split()[1] for ln in lines if ln.startswith("PUBLISHED")]
            during = int(counts[-1]) if counts else -1
        consumer.close()
        producer.close()
        client.close()
    finally:
        server.stop()
    result = {
        "messages": args.messages,
        "publish_msgs_per_s": round(args.messages / publish_s),
        "drain_msgs_per_s": round(args.messages / drain_s),
        "drain_s": round(drain_s, 3),
        "out_of_order": out_of_order,
        "published_during_drain": during,
        "publish_errors": len(errors),
        "cpu_us_per_drained_msg": {
            "broker": round((cpu1[0] - cpu0[0]) * 1e6 / args.messages, 2),
            "bookie": round((cpu1[1] - cpu0[1]) * 1e6 / args.messages, 2),
        },
        "read_ahead_entries": os.environ.get("MAGNETAR_MANAGED_LEDGER_READ_AHEAD_ENTRIES"),
        "loadavg": loadavg(),
    }
    print(json.dumps(result))
    return 0 if out_of_order == 0 and not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Broker memory with many topics of unread backlog: RSS against the entry cache budget.

Issue 12 §4: each topic's managed ledger had an entry cache of its own (256 MB), evicted
only when a subscription read past the entries, so N topics of unread backlog took the
broker's RSS to about N times their backlog. The cache is now one budget for the whole
broker (``managed_ledger_cache_size_mb``). This bench starts ``magnetar standalone`` with a
budget of ``--budget-mb`` (and, by default, no age eviction: the budget alone must bound
memory, the hardest case), then with the official ``pulsar-client`` publishes
``--mb-per-topic`` MB of ``--message-bytes`` messages (no batching) to each of ``--topics``
fresh topics; half of the topics have a durable subscription whose consumer is closed
(backlog nobody reads), half have no subscription at all. Nothing is consumed.

The broker's RSS (``/proc/<pid>/status`` VmRSS) is sampled every 0.1 s: before publishing
(the topics loaded, producers connected), its peak while publishing, and after
``--settle-s``. The bench fails (exit 1) unless the peak growth stays within the budget plus
the stated overhead, ``--overhead-mb`` (default: 48 MB + 25% of the budget: the messages in
flight from the client's pending queue through the broker's buffers to the bookie, the
per-topic objects, and the allocator keeping freed payload memory for reuse).
The last line is one JSON object.

    .venv/bin/python bench/cache_memory.py
    .venv/bin/python bench/cache_memory.py --topics 40 --mb-per-topic 20 --budget-mb 128
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import StandaloneServer, loadavg

MB = 1 << 20


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """The peak RSS of a process, sampled every ``interval_s`` on a thread."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except OSError:
                return
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def connect(service_url: str, args: argparse.Namespace, run_id: str) -> dict[str, Any]:
    import pulsar

    client = pulsar.Client(
        service_url,
        operation_timeout_seconds=60,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        topics = [f"persistent://public/default/cache-mem-{run_id}-{i}" for i in range(args.topics)]
        subscribed = topics[: args.topics // 2]
        for topic in subscribed:  # a durable subscription nobody reads
            client.subscribe(
                topic, "idle", initial_position=pulsar.InitialPosition.Earliest
            ).close()
        producers = [
            client.create_producer(
                t, batching_enabled=False, max_pending_messages=500, block_if_queue_full=True
            )
            for t in topics
        ]
        return {"client": client, "producers": producers, "subscribed": len(subscribed)}
    except Exception:
        client.close()
        raise


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--topics", type=int, default=20)
    p.add_argument("--mb-per-topic", type=float, default=30.0)
    p.add_argument("--message-bytes", type=int, default=10_000)
    p.add_argument("--budget-mb", type=int, default=64, help="managed_ledger_cache_size_mb")
    p.add_argument(
        "--eviction-threshold-ms",
        type=int,
        default=0,
        help="managed_ledger_cache_eviction_time_threshold_millis (0: no age eviction)",
    )
    p.add_argument("--overhead-mb", type=float, help="allowed RSS growth beyond the budget")
    p.add_argument("--settle-s", type=float, default=2.0)
    p.add_argument("--data-dir", help="standalone data dir (default: temporary, removed)")
    args = p.parse_args(argv)
    overhead_mb = args.overhead_mb if args.overhead_mb is not None else 48 + args.budget_mb / 4
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}", flush=True)
    load_start = loadavg()
    print(f"# load average at start: {load_start} on {os.cpu_count()} cores", flush=True)

    conf_dir = tempfile.mkdtemp(prefix="magnetar-cache-mem-")
    conf = os.path.join(conf_dir, "broker.conf")
    with open(conf, "w") as f:
        f.write(f"managed_ledger_cache_size_mb={args.budget_mb}\n")
        f.write(
            f"managed_ledger_cache_eviction_time_threshold_millis={args.eviction_threshold_ms}\n"
        )
    per_topic = int(args.mb_per_topic * MB) // args.message_bytes
    payload = os.urandom(args.message_bytes)
    server = StandaloneServer(args.data_dir, extra_args=["--config", conf])
    import pulsar

    with server:
        pid = server.pid
        assert pid is not None
        run_id = str(time.time_ns())
        session = connect(server.service_url, args, run_id)
        client, producers = session["client"], session["producers"]
        rss_before = rss_bytes(pid)
        print(f"# broker pid {pid}: RSS {rss_before / MB:.0f} MB with {args.topics} topics loaded")
        t0 = time.monotonic()
        errors: list[str] = []

        def sent(res: Any, _msg_id: Any) -> None:
            if res != pulsar.Result.Ok:
                errors.append(str(res))

        try:
            with RssSampler(pid) as sampler:
                for i, producer in enumerate(producers):
                    for _ in range(per_topic):
                        producer.send_async(payload, sent)
                    producer.flush()
                    print(
                        f"# topic {i + 1}/{args.topics}: {per_topic} messages, broker RSS "
                        f"{rss_bytes(pid) / MB:.0f} MB (peak {sampler.peak / MB:.0f} MB)",
                        flush=True,
                    )
                publish_s = time.monotonic() - t0
                time.sleep(args.settle_s)  # the figure after the adds settle, not a sync
            rss_after = rss_bytes(pid)
        finally:
            for producer in producers:
                producer.close()
            client.close()
    backlog_mb = args.topics * per_topic * args.message_bytes / MB
    growth_mb = (sampler.peak - rss_before) / MB
    limit_mb = args.budget_mb + overhead_mb
    result = {
        "topics": args.topics,
        "topics_with_idle_subscription": session["subscribed"],
        "message_bytes": args.message_bytes,
        "messages": args.topics * per_topic,
        "unread_backlog_mb": round(backlog_mb, 1),
        "budget_mb": args.budget_mb,
        "eviction_threshold_ms": args.eviction_threshold_ms,
        "overhead_mb": overhead_mb,
        "rss_before_mb": round(rss_before / MB, 1),
        "rss_peak_mb": round(sampler.peak / MB, 1),
        "rss_after_mb": round(rss_after / MB, 1),
        "rss_growth_peak_mb": round(growth_mb, 1),
        "limit_growth_mb": limit_mb,
        "within_budget": growth_mb <= limit_mb,
        "publish_errors": len(errors),
        "publish_s": round(publish_s, 1),
        "loadavg_before": load_start,
    }
    print(
        f"# unread backlog {backlog_mb:.0f} MB over {args.topics} topics; broker RSS "
        f"{rss_before / MB:.0f} -> peak {sampler.peak / MB:.0f} MB (+{growth_mb:.0f} MB) "
        f"against a budget of {args.budget_mb} MB + {overhead_mb:.0f} MB overhead: "
        f"{'within' if result['within_budget'] else 'OVER'}",
        flush=True,
    )
    print(json.dumps(result), flush=True)
    return 0 if result["within_budget"] and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
